#pragma once
// The lab's experiments, one src/lab/exp_<name>.cpp each. registry.cpp lists them
// all (no static self-registration: the lab is a static library, and a linker drops
// objects nobody references). A new experiment is one new file and a line here and there.
#include "attnlab/lab.hpp"

namespace attnlab::lab {

Experiment additive_experiment();
Experiment classifier_experiment();
Experiment collapse_experiment();
Experiment entropy_experiment();
Experiment fading_experiment();
Experiment gradflow_experiment();
Experiment heads_experiment();
Experiment hedge_experiment();
Experiment invariance_experiment();
Experiment jacobian_experiment();
Experiment lm_experiment();
Experiment mup_experiment();
Experiment qknorm_experiment();
Experiment reparam_experiment();
Experiment saturation_experiment();
Experiment softcap_experiment();
Experiment train_experiment();
Experiment variance_experiment();

}  // namespace attnlab::lab

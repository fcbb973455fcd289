#pragma once
// The forward path a call took, for tests that check which one ran: the engine records it
// only while a test probe is installed (engine/testing/engine_probe.hpp), so a test binary
// that includes this header installs the probe before main, before its first call.
#include "engine/testing/engine_probe.hpp"

namespace attnlab::test {

inline const bool kEngineProbeInstalled = (engine::testing::probe(), true);

using engine::testing::last_forward_path;

}  // namespace attnlab::test

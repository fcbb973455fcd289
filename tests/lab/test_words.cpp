
// The lab's words (src/lab/words/): a template filled by name, and every way it can go wrong
// refused with an Error naming the experiment and the text.
#include <gtest/gtest.h>

#include <functional>

#include "attnlab/lab.hpp"
#include "lab/words.hpp"

namespace lab = attnlab::lab;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const attnlab::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Words, FillsATemplateByName) {
  const lab::Words words("mup");
  EXPECT_EQ(words("figure.panel_last", {{"steps", 7}}), "change after 7 steps");
  // Arguments the template does not name are ignored; specs come from the template.
  EXPECT_EQ(words("figure.panel_last", {{"lr", 0.5}, {"steps", int64_t{12}}}), "change after 12 steps");
  EXPECT_EQ(words("times_more", {{"factor", "3.1"}}), "3.1× more");
}

TEST(Words, FillsAVerdictsFieldsFromItsKeys) {
  const lab::Words words("mup");
  lab::Verdict v;
  v.method = "kept";
  v.range_variable = "kept too";
  words.fill(v, "c16",
             {{"steps", 5},
              {"tolerance", 0.15},
              {"d_first", 16},
              {"d_last", 1024},
              {"optimizer", "Adam"},
              {"optimizer_key", "adam"},
              {"lr", 3e-3},
              {"seeds", 2},
              {"init_sqrt", 0.01},
              {"init_d", -0.5},
              {"change_sqrt", 0.5},
              {"change_d", 0.02},
              {"diverged", ""},
              {"growth_sqrt", "8× more"},
              {"growth_d", "1.1× more"},
              {"conclusion", ""}});
  EXPECT_NE(v.method.find("after 5 steps"), std::string::npos) << v.method;
  EXPECT_NE(v.method.find("within 0.15 of"), std::string::npos) << v.method;
  EXPECT_NE(v.measured_text.find("1/d_k -0.500"), std::string::npos) << v.measured_text;
  EXPECT_EQ(v.range_variable, "kept too");  // no key: left as it was
  EXPECT_FALSE(v.unit.empty());
}

TEST(Words, RefusesWhatIsNotThere) {
  EXPECT_NE(error_of([] { lab::Words("no_such_experiment"); }).find("no_such_experiment"), std::string::npos);
  const lab::Words words("mup");
  EXPECT_NE(error_of([&] { words("no_such_text"); }).find("mup has no text 'no_such_text'"), std::string::npos);
  // A template naming an argument that is not given.
  const std::string missing = error_of([&] { words("figure.panel_last", {{"seeds", 3}}); });
  EXPECT_NE(missing.find("mup 'figure.panel_last'"), std::string::npos) << missing;
}

// Every experiment of the lab writes its sentences from its own words file (the tests' own
// toy experiments, named test_*, write theirs in code).
TEST(Words, EveryExperimentHasItsWords) {
  int checked = 0;
  for (const lab::Experiment* e : lab::experiments()) {
    if (e->name.starts_with("test_")) continue;
    EXPECT_NO_THROW(lab::Words{e->name}) << e->name;
    ++checked;
  }
  EXPECT_GE(checked, 17);
}

}  // namespace

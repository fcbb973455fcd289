// The lab's public interface: parameters, registry, run, tables, outputs.
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "attnlab/lab.hpp"

namespace lab = attnlab::lab;

namespace {

struct ToyConfig {
  int64_t n = 3;
  double scale = 0.5;
  bool flag = false;
  std::string name = "toy";
  std::vector<int64_t> dims{1, 2};
  std::vector<double> xs{0.5};
  void bind(lab::Params& p) {
    p.add("n", n, "rows");
    p.add("scale", scale, "a scale");
    p.add("flag", flag, "a flag");
    p.add("name", name, "a name");
    p.add("dims", dims, "dims");
    p.add("xs", xs, "xs");
  }
};

lab::Result run_toy(const ToyConfig& c, lab::RunContext& ctx) {
  lab::Result r;
  lab::Table t("toy_table", {"i", "value"});
  for (int64_t i = 0; i < c.n; ++i) t.add_row({static_cast<double>(i), c.scale * static_cast<double>(i + ctx.seed)});
  r.tables.push_back(t);
  lab::Figure f;
  f.name = "toy_figure";
  lab::Panel p;
  p.title = "toy";
  p.x_label = "i";
  p.y_label = "value";
  p.series.push_back({"measured", lab::Style::points, t.columns[0], t.columns[1], {}, {}, ""});
  p.series.push_back({"theory", lab::Style::theory, t.columns[0], t.columns[1], {}, {}, ""});
  f.panels.push_back(p);
  r.figures.push_back(f);
  auto v = lab::make_verdict("C1");
  v.outcome = c.flag ? lab::Outcome::confirmed : lab::Outcome::refuted;
  v.figure = "toy_figure";
  r.verdicts.push_back(v);
  return r;
}

// Registered beside the lab's own experiments, as a program would add one.
const bool registered =
    (lab::register_experiment(lab::make_experiment<ToyConfig>("test_toy", "a toy", {"C1"}, run_toy, {{"n", "2"}})), true);

}  // namespace

TEST(LabInterface, RegistryFindsExperiments) {
  ASSERT_NE(lab::find_experiment("test_toy"), nullptr);
  EXPECT_EQ(lab::find_experiment("no_such"), nullptr);
  EXPECT_THROW(lab::run("no_such"), attnlab::Error);
  const auto params = lab::find_experiment("test_toy")->parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].name, "n");
  EXPECT_EQ(params[0].default_value, "3");
  EXPECT_EQ(params[4].default_value, "1,2");
  EXPECT_EQ(params[4].type, "int list");
}

TEST(LabInterface, ConfigIsParsedAndEchoed) {
  const auto r = lab::run("test_toy", {{"n", "4"}, {"flag", "yes"}, {"dims", "3, 5,7"}, {"xs", "1e-3"}}, 7);
  EXPECT_EQ(r.experiment, "test_toy");
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.tables.at(0).rows(), 4u);
  EXPECT_EQ(r.config.at("dims"), "3,5,7");
  EXPECT_EQ(r.config.at("xs"), "0.001");
  EXPECT_EQ(r.verdicts.at(0).outcome, lab::Outcome::confirmed);
  EXPECT_EQ(r.verdicts.at(0).experiment, "test_toy");
  EXPECT_EQ(r.verdicts.at(0).title, lab::claim("C1").title);
}

TEST(LabInterface, BadConfigNamesTheKey) {
  auto message = [](const lab::Config& c) {
    try {
      lab::run("test_toy", c);
    } catch (const attnlab::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"bogus", "1"}}).find("unknown parameter 'bogus'"), std::string::npos);
  EXPECT_NE(message({{"n", "abc"}}).find("n: 'abc' is not an integer"), std::string::npos);
  EXPECT_NE(message({{"n", "3.5"}}).find("n:"), std::string::npos);
  EXPECT_NE(message({{"scale", "nan"}}).find("scale:"), std::string::npos);
  EXPECT_NE(message({{"flag", "maybe"}}).find("flag:"), std::string::npos);
  EXPECT_NE(message({{"dims", "1,,2"}}).find("dims:"), std::string::npos);
  EXPECT_NE(message({{"dims", ""}}).find("dims:"), std::string::npos);
}

TEST(LabInterface, TableRowsMustMatchColumns) {
  lab::Table t("t", {"a", "b"});
  EXPECT_THROW(t.add_row({1.0}), attnlab::Error);
  t.add_row({1.0, 2.0});
  EXPECT_EQ(t.column("b").at(0), 2.0);
  EXPECT_THROW(t.column("c"), attnlab::Error);
}

TEST(LabInterface, ClaimsCatalogue) {
  // C1–C12 from the five articles, then C13 onwards from the papers, numbered in order.
  const auto& all = lab::claims();
  ASSERT_GE(all.size(), 13u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id, "C" + std::to_string(i + 1));
    for (const auto& seed : all[i].seeds) EXPECT_EQ(lab::source(seed).is_paper(), i >= 12) << all[i].id << " " << seed;
    for (const auto& q : all[i].quotes) EXPECT_NO_THROW(lab::source(q.seed)) << all[i].id;
  }
  EXPECT_EQ(lab::claim("C13").seeds, std::vector<std::string>{"ssmax"});
  EXPECT_THROW(lab::claim("C99"), attnlab::Error);
  EXPECT_THROW(lab::source("999"), attnlab::Error);
  EXPECT_EQ(lab::parse_outcome("pending"), lab::Outcome::pending);
  EXPECT_THROW(lab::parse_outcome("maybe"), attnlab::Error);
}

TEST(LabInterface, WritesCsvJsonAndFigure) {
  if (!lab::plotting_available()) GTEST_SKIP() << "gnuplot with the pngcairo terminal is not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("attnlab-lab-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto r = lab::run("test_toy", {}, 1);
  lab::write_result(r, dir);
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "toy_table.csv"));
  EXPECT_GT(std::filesystem::file_size(dir / "figures" / "toy_figure.png"), 1000u);
  EXPECT_TRUE(std::filesystem::exists(dir / "figures" / "toy_figure.gp"));
  EXPECT_TRUE(std::filesystem::exists(dir / "test_toy.json"));
  std::ifstream csv(dir / "data" / "toy_table.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "i,value");
  std::filesystem::remove_all(dir);
}

TEST(LabInterface, UnwritableDirectoryIsAnError) {
  const auto r = lab::run("test_toy");
  EXPECT_THROW(lab::write_result(r, "/proc/attnlab-cannot-write-here"), attnlab::Error);
}

// RunContext::interrupt: the lab's loops and the training steps ask it, and a run asked to
// stop throws Interrupted (not an Error with the experiment's name before it, which would
// hide what happened from the caller that raises KeyboardInterrupt).
TEST(LabInterface, AnInterruptStopsARun) {
  int asked = 0;
  for (const char* name : {"variance", "train"}) {
    const lab::Experiment* e = lab::find_experiment(name);
    ASSERT_NE(e, nullptr);
    EXPECT_THROW(lab::run(name, e->quick, 0, {}, [&] { return ++asked > 0; }), attnlab::Interrupted) << name;
  }
  EXPECT_GE(asked, 2);
}

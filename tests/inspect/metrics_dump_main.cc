// Prints the Prometheus exposition of a runtime after the fixed scenario of
// inspect_test_util.h; promtool_test.sh checks it with promtool.
#include <cstdio>

#include "kvtier/metrics.h"
#include "tests/inspect/inspect_test_util.h"

int main() {
  auto s = kvtier::testing::OpenScenario();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  kvtier::testing::RunScenario(*s);
  std::fputs(kvtier::RenderPrometheusText(s->runtime->Stats()).c_str(), stdout);
  return 0;
}

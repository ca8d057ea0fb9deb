// Runs the kvtier-inspect executable (KVTIER_INSPECT_BIN) as a user would:
// its own process, stdout and stderr captured in files of a directory.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvtier::testing {

struct CliRun {
  int rc = -1;
  std::string out, err;
};

inline std::string SlurpFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `dir`: where the output files go. The run is bounded by 30 s.
inline CliRun RunInspect(const std::string& dir, const std::string& args) {
  const std::string out = dir + "/cli.out", err = dir + "/cli.err";
  const std::string cmd = std::string("timeout 30 ") + KVTIER_INSPECT_BIN + " " + args + " >" +
                          out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = SlurpFile(out);
  r.err = SlurpFile(err);
  return r;
}

}  // namespace kvtier::testing

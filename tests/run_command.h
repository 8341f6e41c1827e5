// Runs a shell command (bounded by the caller's `timeout`), and returns its exit code
// and what it printed: the CLI tests' way of running the built `sluice` binary.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace sluice::testing {

struct CommandRun {
  int exit_code = -1;  // 128 when it did not exit normally
  std::string output;
};

inline CommandRun RunCommand(const std::string& command) {
  CommandRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return run;
}

}  // namespace sluice::testing

// Links against the installed libsluice and makes one decision on the embedded store.
#include <cstdio>

#include <sluice/sluice.h>

int main() {
  auto client = sluice::Client::Create({.url = "memory://"});
  if (!client.ok()) return 1;
  auto limiter = (*client)->MakeLimiter("pkg", {.limit = 1, .window = std::chrono::seconds(1)});
  if (!limiter.ok()) return 1;
  auto first = limiter->Check("x");
  auto second = limiter->Check("x");
  std::printf("first %s, second %s\n", first->ToString().c_str(), second->ToString().c_str());
  return first->allowed && !second->allowed ? 0 : 1;
}

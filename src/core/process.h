// Facts about the calling process and thread that the client checks on its public entry
// points: whether the process forked since an object was made, and whether the calling
// thread is one of a client's I/O threads.
//
// Thread-safety: thread-safe; both reads are one relaxed atomic load or a thread_local.
#pragma once

#include <cstdint>

namespace sluice::internal {

// Counts the fork()s in this process's lineage (pthread_atfork's child handler): an
// object made when this was g answers "forked" once it differs.
uint64_t ForkGeneration();

// True on a thread that runs a client's io_context (any client of this process): a
// blocking call there would wait for the thread that is waiting.
bool OnIoThread();
// Marks the calling thread as an I/O thread (the client's thread function, first thing).
void MarkIoThread();

}  // namespace sluice::internal

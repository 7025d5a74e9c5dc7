// How a process that runs libtorch on the CPU keeps the memory it frees.
//
// libtorch's CPU tensors come straight from malloc and go back to it every
// step. glibc serves blocks over its mmap threshold (128 KiB until a freed
// mapped block raises it) with mmap and unmaps them on free, and gives the
// top of the heap back once it passes the trim threshold, so a training
// step page-faults its activations in again, every step: the default CNN
// job spent 75 s of its 146 s in the kernel, and its first epoch ran at a
// fifth of the speed of the next two, which came after the evaluation had
// raised the thresholds by itself.
#pragma once

namespace dtrain {

// Raises glibc's mmap threshold to its ceiling (32 MiB) and the trim
// threshold to 256 MiB, so that freed blocks stay in the heap for the next
// step. A process whose environment sets any of glibc's MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_ or MALLOC_MMAP_MAX_ keeps what it
// chose; other C libraries are left alone. Returns whether it changed them.
bool keepFreedHeapForReuse();

}  // namespace dtrain

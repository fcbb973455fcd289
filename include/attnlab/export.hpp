#pragma once
// Symbol visibility. libattnlab is built with -fvisibility=hidden: only what is marked
// ATTNLAB_API is exported from the shared library (the attention API in this directory),
// so its internals (kernels, validation helpers, Highway, OpenMP) are free to change and
// never clash with a user's symbols. The same macro on the user's side is harmless.
#if defined(__GNUC__) || defined(__clang__)
#define ATTNLAB_API __attribute__((visibility("default")))
#else
#define ATTNLAB_API
#endif

// Symbol visibility for the kvtier shared library.
//
// The library is compiled with -fvisibility=hidden; only declarations marked
// KVTIER_EXPORT are part of the installed ABI. Internal classes stay hidden in
// the shared object but remain linkable from the static internal library used
// by the tests.
#pragma once

#if defined(_WIN32)
#define KVTIER_EXPORT
#else
#define KVTIER_EXPORT [[gnu::visibility("default")]]
#endif

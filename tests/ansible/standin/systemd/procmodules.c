/* gpufleet tests only: for a kernel built without module support (no /proc/modules, e.g. the
 * 2-core dev VM), the systemd target's /etc/ld.so.preload names this shim, which opens the
 * simulated driver's module list (tests/ansible/standin/systemd/simdriver) where a program opens
 * /proc/modules. Where the kernel has the file, the harness binds the simulated one over it and
 * this shim is not installed. Covers the libc entry points awk, grep and python use. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *redirect(const char *path) {
    return (path && strcmp(path, "/proc/modules") == 0) ? "/run/gpufleet-sim/modules" : path;
}

#define OPEN_LIKE(name)                                                                 \
    int name(const char *path, int flags, ...) {                                        \
        static int (*real)(const char *, int, ...);                                     \
        va_list ap; mode_t mode = 0;                                                    \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                      \
        va_start(ap, flags); if (flags & (O_CREAT | O_TMPFILE)) mode = va_arg(ap, mode_t); \
        va_end(ap);                                                                     \
        return real(redirect(path), flags, mode);                                       \
    }
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                               \
    int name(int dirfd, const char *path, int flags, ...) {                             \
        static int (*real)(int, const char *, int, ...);                                \
        va_list ap; mode_t mode = 0;                                                    \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                      \
        va_start(ap, flags); if (flags & (O_CREAT | O_TMPFILE)) mode = va_arg(ap, mode_t); \
        va_end(ap);                                                                     \
        return real(dirfd, redirect(path), flags, mode);                                \
    }
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

#define FOPEN_LIKE(name)                                                                \
    FILE *name(const char *path, const char *mode) {                                    \
        static FILE *(*real)(const char *, const char *);                               \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                      \
        return real(redirect(path), mode);                                              \
    }
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

#define FORTIFIED(name, realname)                                                       \
    int name(const char *path, int flags) {                                             \
        static int (*real)(const char *, int);                                          \
        if (!real) real = dlsym(RTLD_NEXT, realname);                                   \
        return real(redirect(path), flags);                                             \
    }
FORTIFIED(__open_2, "__open_2")
FORTIFIED(__open64_2, "__open64_2")

#define FORTIFIED_AT(name)                                                              \
    int name(int dirfd, const char *path, int flags) {                                  \
        static int (*real)(int, const char *, int);                                     \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                      \
        return real(dirfd, redirect(path), flags);                                      \
    }
FORTIFIED_AT(__openat_2)
FORTIFIED_AT(__openat64_2)

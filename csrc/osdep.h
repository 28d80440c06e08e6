/* osdep.h -- the durability calls that differ between systems, and
 * opening the casket's files. */
#ifndef QS_OSDEP_H
#define QS_OSDEP_H
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* One pause in a spin-wait: tells the CPU the loop waits for another
 * core's store (x86's PAUSE spares the other hyperthread and the memory
 * order machinery); elsewhere a fence, which at least re-reads memory. */
#if defined(__x86_64__) || defined(__i386__)
#define os_cpu_relax() __builtin_ia32_pause()
#else
#define os_cpu_relax() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/* Makes the file's data (and the metadata needed to read it) durable.
 * Returns 0, or -1 with errno set.  macOS's fsync only reaches the drive's
 * cache; F_FULLFSYNC reaches the medium. */
static inline int os_datasync(int fd)
{
#if defined(__APPLE__)
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
    return fsync(fd);
#else
    return fdatasync(fd);
#endif
}

/* Makes the file (or a directory's entries) durable with its metadata: a
 * file made by compaction or backup, and the directory that names it.
 * Returns 0, or -1 with errno set.  As in os_datasync, macOS needs
 * F_FULLFSYNC to reach the medium. */
static inline int os_fullsync(int fd)
{
#if defined(__APPLE__)
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
#endif
    return fsync(fd);
}

/* Starts writing [off, off + len) of the file to the device without
 * waiting for it, so that a later os_datasync finds less left to do.  A
 * hint: nothing is promised, and other systems do nothing. */
static inline void os_write_behind(int fd, uint64_t off, uint64_t len)
{
#if defined(__linux__)
    (void)sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
    (void)off;
    (void)len;
#endif
}

/* pread, or with nowait a pread that answers only from the kernel's page
 * cache: -1 with errno EAGAIN where the data would have to come from the
 * device (Linux's RWF_NOWAIT; EAGAIN also where the system or the file
 * system cannot tell, so a caller that may not wait always learns it).
 * Returns what pread returns. */
static inline ssize_t os_pread(int fd, void *buf, size_t n, off_t off, int nowait)
{
    if (!nowait)
        return pread(fd, buf, n, off);
#if defined(__linux__) && defined(RWF_NOWAIT)
    struct iovec v = {buf, n};
    ssize_t r = preadv2(fd, &v, 1, off, RWF_NOWAIT);
    if (r < 0 && (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL))
        errno = EAGAIN;
    return r;
#else
    errno = EAGAIN;
    return -1;
#endif
}

/* Opens one of the casket's files (flags O_RDONLY or O_RDWR, perhaps
 * O_CREAT: then created with permission bits perm, less the umask) and
 * refuses anything but a regular file: a pipe would block the
 * open, a device or directory is nobody's casket.  *created says whether
 * this call created it (so that a failed open can remove only what it
 * made).  Returns 0 (*fd open), EISDIR, notfile (the caller's code for "not
 * a regular file") or errno. */
static inline int os_open_regular(const char *path, int flags, mode_t perm, int notfile, int *fd,
                                  int *created)
{
    *created = 0;
    for (int tries = 0;; tries++) {
        int f;
        if (flags & O_CREAT) {
            f = open(path, flags | O_EXCL | O_NONBLOCK | O_CLOEXEC, perm);
            if (f >= 0) {
                *created = 1;
            } else if (errno == EEXIST) {
                f = open(path, (flags & ~O_CREAT) | O_NONBLOCK | O_CLOEXEC);
                if (f < 0 && errno == ENOENT && tries < 100)
                    continue;   /* removed in between: create it after all */
            }
        } else {
            f = open(path, flags | O_NONBLOCK | O_CLOEXEC);
        }
        if (f < 0)
            return errno;
        struct stat st;
        int rc = fstat(f, &st) != 0     ? errno
                 : S_ISDIR(st.st_mode) ? EISDIR
                 : !S_ISREG(st.st_mode) ? notfile
                                        : 0;
        if (rc == 0 && fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) != 0)
            rc = errno;
        if (rc) {
            close(f);
            return rc;
        }
        *fd = f;
        return 0;
    }
}

#endif

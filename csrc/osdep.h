/* osdep.h -- the durability calls that differ between systems. */
#ifndef QS_OSDEP_H
#define QS_OSDEP_H
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

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

#endif

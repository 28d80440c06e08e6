/* osdep.h -- the one durability call that differs between systems. */
#ifndef QS_OSDEP_H
#define QS_OSDEP_H
#include <fcntl.h>
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

#endif

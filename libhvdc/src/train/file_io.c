/*
 * file_io.c - whole files in and out for checkpoint.c and elastic.c (see file_io.h).
 *
 *   write:  path.tmp.<pid> -> write all -> fsync -> rename over path -> fsync the directory
 *
 * rename is atomic and the data is on disk before the rename makes it visible, so a crash at
 * any point leaves path either as it was or as the new whole file.
 * The caller's thread.
 */
#include "train/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

static hvd_status sys_fail(const char *fn, const char *what, const char *path, int err) {
    return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: cannot %s '%s': %s; the previous file, if "
                      "any, is untouched", fn, what, path, strerror(err));
}

hvd_status hvdc__write_file_atomically(const char *fn, const char *path, const void *buf,
                                       size_t nbytes) {
    char tmp[4096 + 32], dir[4096 + 2];
    if (strlen(path) > 4000)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: path is longer than 4000 bytes", fn);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return sys_fail(fn, "create", tmp, errno);
    const unsigned char *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        ssize_t w = write(fd, p + done, nbytes - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return sys_fail(fn, "write", tmp, err);
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return sys_fail(fn, "flush to disk", tmp, err);
    }
    if (close(fd) != 0) {
        int err = errno;
        unlink(tmp);
        return sys_fail(fn, "flush to disk", tmp, err);
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return sys_fail(fn, "rename a temporary file onto", path, err);
    }
    // Make the rename itself durable: fsync the directory that holds path.
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return sys_fail(fn, "open the directory of", path, errno);
    int rc = fsync(dfd), err = errno;
    close(dfd);
    if (rc != 0 && err != EINVAL) return sys_fail(fn, "flush the directory of", path, err);
    return HVD_OK;
}

hvd_status hvdc__read_file(const char *fn, const char *what, const char *path,
                           unsigned char **buf, size_t *nbytes, int *missing) {
    *buf = NULL;
    *nbytes = 0;
    if (missing != NULL) *missing = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (missing != NULL) *missing = errno == ENOENT;
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: cannot open %s '%s': %s", fn, what, path,
                          strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: %s '%s' is not a regular file", fn, what,
                          path);
    }
    size_t size = (size_t)sb.st_size, done = 0;
    unsigned char *b = malloc(size > 0 ? size : 1);
    if (b == NULL) {
        close(fd);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", fn, size);
    }
    while (done < size) {
        ssize_t r = read(fd, b + done, size - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    int err = errno;
    close(fd);
    if (done < size) {
        free(b);
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: cannot read %s '%s': %s", fn, what, path,
                          done < size && err == 0 ? "file shrank while reading" : strerror(err));
    }
    *buf = b;
    *nbytes = size;
    return HVD_OK;
}

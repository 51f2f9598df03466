/* rendezvous.c - the TCP rendezvous (rendezvous.h).
 *
 * Wire format: every message starts with a 24-byte header, big-endian:
 * magic "HGRV", type, two 32-bit arguments, a 64-bit payload length; the
 * payload follows. HELLO (rank, world) from each rank once connected;
 * WELCOME from rank 0 when all are there; BLOB (payload) and ACK; BARRIER and
 * RELEASE; REJECT (payload: the reason, text) from rank 0 whenever it gives
 * up, so that the others stop at once. All sockets are non-blocking and
 * every wait is a poll() bounded by the operation's deadline. */
#include "rendezvous.h"
#include "clock.h"
#include "errmsg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MAGIC = 0x48475256u /* "HGRV" */, HDR = 24, TEXT_MAX = 1024 };
enum { T_HELLO = 1, T_WELCOME, T_REJECT, T_BLOB, T_ACK, T_BARRIER, T_RELEASE };

struct Rendezvous {
    char addr[256];
    int port, rank, world, timeout_s;
    int *fd; /* rank 0: fd[r] is rank r's connection (fd[0] unused); others: fd[0] is rank 0 */
};

typedef struct {
    uint32_t type, a, b;
    uint64_t len;
} Hdr;

/* "rendezvous at ADDR:PORT (rank R of W): " + the rest */
static void rdv_err(const Rendezvous *r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rdv_err(const Rendezvous *r, char *err, size_t errlen, const char *fmt, ...) {
    char what[TEXT_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    set_err(err, errlen, "rendezvous at %s:%d (rank %d of %d): %s", r->addr, r->port, r->rank, r->world, what);
}

static int ms_left(double deadline) {
    double s = deadline - now_seconds();
    return s <= 0 ? 0 : s > 1e6 ? 1000000000 : (int)(s * 1000) + 1;
}

/* ---- byte I/O with a deadline: 0, or -1 with *why set ---- */

/* After a send or recv that moved nothing (errno says why): 0 when fd is
 * ready for events again (or the wait was interrupted), -1 with *why on an
 * error or when the deadline passed (*why = timeout). */
static int wait_ready(int fd, short events, double deadline, const char *timeout, const char **why) {
    if (errno == EINTR) return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        *why = strerror(errno);
        return -1;
    }
    struct pollfd pf = {fd, events, 0};
    const int rc = poll(&pf, 1, ms_left(deadline));
    if (rc < 0 && errno != EINTR) {
        *why = strerror(errno);
        return -1;
    }
    if (rc == 0) {
        *why = timeout;
        return -1;
    }
    return 0;
}

static int io_send(int fd, const void *p, size_t n, double deadline, const char **why) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k > 0) {
            c += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) errno = EAGAIN; /* nothing sent, no error: wait until fd takes more */
        if (wait_ready(fd, POLLOUT, deadline, "timed out sending", why) < 0) return -1;
    }
    return 0;
}

/* *why: "timed out" (nothing within the deadline), "closed" (the peer closed
 * the connection; *got bytes had arrived) or the system's error */
static int io_recv(int fd, void *p, size_t n, double deadline, size_t *got, const char **why) {
    char *c = p;
    size_t want = n;
    *got = 0;
    while (*got < want) {
        ssize_t k = recv(fd, c + *got, want - *got, 0);
        if (k > 0) {
            *got += (size_t)k;
            continue;
        }
        if (k == 0) {
            *why = "closed";
            return -1;
        }
        if (wait_ready(fd, POLLIN, deadline, "timed out", why) < 0) return -1;
    }
    return 0;
}

static void put32(unsigned char *p, uint32_t v) {
    uint32_t b = htonl(v);
    memcpy(p, &b, 4);
}
static uint32_t get32(const unsigned char *p) {
    uint32_t b;
    memcpy(&b, p, 4);
    return ntohl(b);
}

static int send_msg(int fd, uint32_t type, uint32_t a, uint32_t b, const void *payload, uint64_t len, double deadline,
                    const char **why) {
    unsigned char h[HDR];
    put32(h, MAGIC);
    put32(h + 4, type);
    put32(h + 8, a);
    put32(h + 12, b);
    put32(h + 16, (uint32_t)(len >> 32));
    put32(h + 20, (uint32_t)len);
    if (io_send(fd, h, HDR, deadline, why) < 0) return -1;
    return len ? io_send(fd, payload, (size_t)len, deadline, why) : 0;
}

/* A header; -2 when the bytes are not ours (bad magic). */
static int recv_hdr(int fd, Hdr *h, double deadline, size_t *got, const char **why) {
    unsigned char b[HDR];
    if (io_recv(fd, b, HDR, deadline, got, why) < 0) return -1;
    if (get32(b) != MAGIC) {
        *why = "not an hgrn rendezvous (bad magic)";
        return -2;
    }
    h->type = get32(b + 4);
    h->a = get32(b + 8);
    h->b = get32(b + 12);
    h->len = ((uint64_t)get32(b + 16) << 32) | get32(b + 20);
    return 0;
}

/* The text of a REJECT whose header was read (truncated to TEXT_MAX). */
static void recv_reason(int fd, uint64_t len, double deadline, char *out, size_t outlen) {
    char buf[TEXT_MAX + 1];
    size_t n = len < TEXT_MAX ? (size_t)len : TEXT_MAX, got = 0;
    const char *why;
    if (io_recv(fd, buf, n, deadline, &got, &why) < 0) n = got;
    if (n == 0) {
        snprintf(out, outlen, "(no reason given)");
        return;
    }
    if (n > outlen - 1) n = outlen - 1;
    memcpy(out, buf, n);
    out[n] = 0;
}

/* A peer's description of a failed receive of `what` (n bytes expected). */
static void recv_failure(char *out, size_t outlen, const char *why, size_t got, size_t n, int timeout_s) {
    if (!strcmp(why, "closed"))
        snprintf(out, outlen, "connection closed after %zu of %zu bytes", got, n);
    else if (!strcmp(why, "timed out"))
        snprintf(out, outlen, "nothing within %d s", timeout_s);
    else
        snprintf(out, outlen, "%s", why);
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* ---- rank 0 ---- */

void rdv_fail(Rendezvous *r, const char *why) {
    if (!r || r->rank != 0) return;
    double deadline = now_seconds() + 1.0; /* best effort: a dead peer must not hold us */
    const char *w;
    size_t len = strnlen(why, TEXT_MAX);
    for (int i = 1; i < r->world; i++)
        if (r->fd[i] >= 0) send_msg(r->fd[i], T_REJECT, 0, 0, why, len, deadline, &w);
}

/* Rank 0 gives up: every connected rank is told why, err gets the same line. */
static Rendezvous *fail0(Rendezvous *r, char *err, size_t errlen, const char *why) {
    rdv_fail(r, why);
    rdv_err(r, err, errlen, "%s", why);
    rdv_close(r);
    return NULL;
}

static int listen_socket(Rendezvous *r, char *err, size_t errlen) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(r->addr, NULL, &hints, &ai);
    if (rc != 0) {
        rdv_err(r, err, errlen, "cannot resolve MASTER_ADDR '%s': %s", r->addr, gai_strerror(rc));
        return -1;
    }
    int fam = ai->ai_family;
    freeaddrinfo(ai);
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rdv_err(r, err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        (fam == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0)) {
        rdv_err(r, err, errlen, "setsockopt: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* every address of the family: MASTER_ADDR may name this host in a way
     * (a hostname, another interface) that a bind to it would miss */
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (fam == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        s6->sin6_port = htons((uint16_t)r->port);
        sl = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_port = htons((uint16_t)r->port);
        sl = sizeof *s4;
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
        int e = errno;
        rdv_err(r, err, errlen, "rank 0 cannot listen on port %d: %s%s", r->port, strerror(e),
                e == EADDRINUSE ? " (another run on this MASTER_PORT?)" : "");
        close(fd);
        return -1;
    }
    if (listen(fd, r->world + 16) < 0) {
        rdv_err(r, err, errlen, "listen: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static Rendezvous *open_rank0(Rendezvous *r, char *err, size_t errlen) {
    int lfd = listen_socket(r, err, errlen);
    if (lfd < 0) {
        rdv_close(r);
        return NULL;
    }
    double deadline = now_seconds() + r->timeout_s;
    char why[TEXT_MAX];
    int connected = 0;
    while (connected < r->world - 1) {
        struct pollfd pf = {lfd, POLLIN, 0};
        int rc = poll(&pf, 1, ms_left(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) {
            snprintf(why, sizeof why, "poll: %s", strerror(errno));
            close(lfd);
            return fail0(r, err, errlen, why);
        }
        if (rc == 0) { /* the deadline: name the ranks that never came */
            int n = snprintf(why, sizeof why, "rank 0 waited %d s; rank%s", r->timeout_s,
                             r->world - 1 - connected > 1 ? "s" : "");
            for (int i = 1, listed = 0; i < r->world && n < (int)sizeof why - 40; i++)
                if (r->fd[i] < 0) n += snprintf(why + n, sizeof why - n, "%s %d", listed++ ? "," : "", i);
            snprintf(why + n, sizeof why - n, " of WORLD_SIZE %d did not connect", r->world);
            close(lfd);
            return fail0(r, err, errlen, why);
        }
        int cfd = accept(lfd, NULL, NULL);
        if (cfd >= 0 && (fcntl(cfd, F_SETFL, O_NONBLOCK) < 0 || fcntl(cfd, F_SETFD, FD_CLOEXEC) < 0)) {
            snprintf(why, sizeof why, "fcntl on an accepted connection: %s", strerror(errno));
            close(cfd);
            close(lfd);
            return fail0(r, err, errlen, why);
        }
        if (cfd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
            snprintf(why, sizeof why, "accept: %s", strerror(errno));
            close(lfd);
            return fail0(r, err, errlen, why);
        }
        Hdr h;
        size_t got;
        const char *w;
        if (recv_hdr(cfd, &h, deadline, &got, &w) < 0 || h.type != T_HELLO) {
            close(cfd); /* a stray connection, or a peer that died at once: it is not a rank yet */
            continue;
        }
        int bad = 0;
        if ((int)h.b != r->world) {
            snprintf(why, sizeof why, "WORLD_SIZE differs between ranks: rank %u has %u, rank 0 has %d", h.a, h.b,
                     r->world);
            bad = 1;
        } else if (h.a < 1 || (int)h.a >= r->world) {
            snprintf(why, sizeof why, "a process says RANK %u, outside 1..%d of WORLD_SIZE %d", h.a, r->world - 1,
                     r->world);
            bad = 1;
        } else if (r->fd[h.a] >= 0) {
            snprintf(why, sizeof why, "two processes say RANK %u", h.a);
            bad = 1;
        }
        if (bad) {
            send_msg(cfd, T_REJECT, 0, 0, why, strlen(why), now_seconds() + 1.0, &w);
            close(cfd);
            close(lfd);
            return fail0(r, err, errlen, why);
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* latency only: not fatal */
        r->fd[h.a] = cfd;
        connected++;
    }
    close(lfd);
    for (int i = 1; i < r->world; i++) {
        const char *w;
        if (send_msg(r->fd[i], T_WELCOME, 0, 0, NULL, 0, deadline + 5.0, &w) < 0) {
            snprintf(why, sizeof why, "cannot reach rank %d after it connected: %s", i, w);
            return fail0(r, err, errlen, why);
        }
    }
    return r;
}

/* ---- ranks 1 .. world-1 ---- */

/* One non-blocking connect to ai, bounded by the deadline (and 2 s per try). */
static int try_connect(const struct addrinfo *ai, double deadline, int *e) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *e = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
        *e = errno;
        close(fd);
        return -1;
    }
    double until = now_seconds() + 2.0;
    if (until > deadline) until = deadline;
    struct pollfd pf = {fd, POLLOUT, 0};
    int rc;
    while ((rc = poll(&pf, 1, ms_left(until))) < 0 && errno == EINTR) {}
    if (rc <= 0) {
        *e = rc == 0 ? ETIMEDOUT : errno;
        close(fd);
        return -1;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) soerr = errno;
    if (soerr) {
        *e = soerr;
        close(fd);
        return -1;
    }
    return fd;
}

static Rendezvous *open_peer(Rendezvous *r, char *err, size_t errlen) {
    double deadline = now_seconds() + r->timeout_s;
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    int fd = -1, last = ECONNREFUSED;
    const char *last_what = NULL;
    while (fd < 0) {
        struct addrinfo hints = {0}, *ai = NULL;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(r->addr, port, &hints, &ai);
        if (rc == 0) {
            for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) fd = try_connect(p, deadline, &last);
            freeaddrinfo(ai);
            last_what = NULL;
        } else if (rc != EAI_AGAIN) {
            rdv_err(r, err, errlen, "cannot resolve MASTER_ADDR '%s': %s", r->addr, gai_strerror(rc));
            rdv_close(r);
            return NULL;
        } else {
            last_what = gai_strerror(rc);
        }
        if (fd >= 0) break;
        if (now_seconds() >= deadline) {
            if (last_what) /* the name never resolved (no DNS answer within the timeout) */
                rdv_err(r, err, errlen, "cannot resolve MASTER_ADDR '%s' within %d s: %s", r->addr, r->timeout_s,
                        last_what);
            else
                rdv_err(r, err, errlen,
                        "could not reach rank 0 within %d s: %s (is rank 0 running, with the "
                        "same MASTER_ADDR and MASTER_PORT?)",
                        r->timeout_s, strerror(last));
            rdv_close(r);
            return NULL;
        }
        struct timespec ts = {0, 100 * 1000 * 1000}; /* rank 0 may not be listening yet */
        nanosleep(&ts, NULL);
    }
    r->fd[0] = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* latency only: not fatal */
    const char *w;
    if (send_msg(fd, T_HELLO, (uint32_t)r->rank, (uint32_t)r->world, NULL, 0, deadline, &w) < 0) {
        rdv_err(r, err, errlen, "sending this rank's hello to rank 0: %s", w);
        rdv_close(r);
        return NULL;
    }
    /* rank 0 answers once every rank is there: wait up to one more timeout,
     * since the last rank may have started that late */
    Hdr h;
    size_t got;
    int rc = recv_hdr(fd, &h, deadline + r->timeout_s, &got, &w);
    if (rc == 0 && h.type == T_WELCOME) return r;
    char why[TEXT_MAX];
    if (rc == 0 && h.type == T_REJECT) {
        recv_reason(fd, h.len, now_seconds() + 1.0, why, sizeof why);
        rdv_err(r, err, errlen, "rank 0 refused: %s", why);
    } else if (rc == 0) {
        rdv_err(r, err, errlen, "unexpected message %u from rank 0 while waiting for the other ranks", h.type);
    } else {
        recv_failure(why, sizeof why, w, got, HDR, 2 * r->timeout_s);
        rdv_err(r, err, errlen, "waiting for rank 0 to see every rank: %s", why);
    }
    rdv_close(r);
    return NULL;
}

Rendezvous *rdv_open(const char *addr, int port, int rank, int world, int timeout_s, char *err, size_t errlen) {
    if (!addr || !addr[0] || port < 1 || port > 65535 || world < 1 || rank < 0 || rank >= world || timeout_s < 1) {
        set_err(err, errlen, "rendezvous at %s:%d (rank %d of %d, timeout %d s): invalid arguments",
                addr ? addr : "(null)", port, rank, world, timeout_s);
        return NULL;
    }
    Rendezvous *r = calloc(1, sizeof *r);
    if (!r || !(r->fd = malloc(sizeof(int) * (size_t)world))) {
        free(r);
        set_err(err, errlen, "rendezvous: out of memory");
        return NULL;
    }
    snprintf(r->addr, sizeof r->addr, "%s", addr);
    r->port = port;
    r->rank = rank;
    r->world = world;
    r->timeout_s = timeout_s;
    for (int i = 0; i < world; i++) r->fd[i] = -1;
    if (world == 1) return r;
    return rank == 0 ? open_rank0(r, err, errlen) : open_peer(r, err, errlen);
}

/* ---- after the rendezvous ---- */

/* A peer waits for message `type` from rank 0; a REJECT becomes "rank 0
 * failed: why". Sets *len to the payload length. */
static int peer_expect(Rendezvous *r, uint32_t type, const char *waiting_for, uint64_t *len, double deadline, char *err,
                       size_t errlen) {
    Hdr h;
    size_t got;
    const char *w;
    char why[TEXT_MAX];
    int rc = recv_hdr(r->fd[0], &h, deadline, &got, &w);
    if (rc == 0 && h.type == type) {
        *len = h.len;
        return 0;
    }
    if (rc == 0 && h.type == T_REJECT) {
        recv_reason(r->fd[0], h.len, now_seconds() + 1.0, why, sizeof why);
        rdv_err(r, err, errlen, "rank 0 failed: %s", why);
    } else if (rc == 0) {
        rdv_err(r, err, errlen, "unexpected message %u from rank 0 while waiting for %s", h.type, waiting_for);
    } else {
        recv_failure(why, sizeof why, w, got, HDR, r->timeout_s);
        rdv_err(r, err, errlen, "waiting for %s from rank 0: %s", waiting_for, why);
    }
    return -1;
}

/* Rank 0 waits for message `type` from rank i. */
static int rank0_expect(Rendezvous *r, int i, uint32_t type, const char *waiting_for, double deadline, char *err,
                        size_t errlen) {
    Hdr h;
    size_t got;
    const char *w;
    char why[TEXT_MAX];
    int rc = recv_hdr(r->fd[i], &h, deadline, &got, &w);
    if (rc == 0 && h.type == type && h.len == 0) return 0;
    if (rc == 0)
        snprintf(why, sizeof why, "unexpected message %u from rank %d while waiting for %s", h.type, i, waiting_for);
    else {
        char f[256];
        recv_failure(f, sizeof f, w, got, HDR, r->timeout_s);
        snprintf(why, sizeof why, "waiting for %s from rank %d: %s", waiting_for, i, f);
    }
    rdv_fail(r, why);
    rdv_err(r, err, errlen, "%s", why);
    return -1;
}

int rdv_broadcast(Rendezvous *r, void *blob, size_t len, char *err, size_t errlen) {
    if (r->world == 1) return 0;
    double deadline = now_seconds() + r->timeout_s;
    const char *w;
    if (r->rank == 0) {
        for (int i = 1; i < r->world; i++)
            if (send_msg(r->fd[i], T_BLOB, 0, 0, blob, len, deadline, &w) < 0) {
                char why[TEXT_MAX];
                snprintf(why, sizeof why, "sending %zu bytes to rank %d: %s", len, i, w);
                rdv_fail(r, why);
                rdv_err(r, err, errlen, "%s", why);
                return -1;
            }
        for (int i = 1; i < r->world; i++)
            if (rank0_expect(r, i, T_ACK, "the acknowledgement", deadline, err, errlen) < 0) return -1;
        return 0;
    }
    uint64_t n;
    if (peer_expect(r, T_BLOB, "the blob", &n, deadline, err, errlen) < 0) return -1;
    if (n != len) {
        rdv_err(r, err, errlen, "rank 0 sent %llu bytes, this rank expects %zu (different hgrn builds?)",
                (unsigned long long)n, len);
        return -1;
    }
    size_t got;
    if (io_recv(r->fd[0], blob, len, deadline, &got, &w) < 0) {
        char why[256];
        recv_failure(why, sizeof why, w, got, len, r->timeout_s);
        rdv_err(r, err, errlen, "receiving the blob from rank 0: %s", why);
        return -1;
    }
    if (send_msg(r->fd[0], T_ACK, 0, 0, NULL, 0, deadline, &w) < 0) {
        rdv_err(r, err, errlen, "acknowledging the blob to rank 0: %s", w);
        return -1;
    }
    return 0;
}

int rdv_barrier(Rendezvous *r, char *err, size_t errlen) {
    if (r->world == 1) return 0;
    double deadline = now_seconds() + r->timeout_s;
    const char *w;
    if (r->rank == 0) {
        for (int i = 1; i < r->world; i++)
            if (rank0_expect(r, i, T_BARRIER, "the barrier", deadline, err, errlen) < 0) return -1;
        for (int i = 1; i < r->world; i++)
            if (send_msg(r->fd[i], T_RELEASE, 0, 0, NULL, 0, deadline, &w) < 0) {
                char why[TEXT_MAX];
                snprintf(why, sizeof why, "releasing rank %d from the barrier: %s", i, w);
                rdv_fail(r, why);
                rdv_err(r, err, errlen, "%s", why);
                return -1;
            }
        return 0;
    }
    if (send_msg(r->fd[0], T_BARRIER, 0, 0, NULL, 0, deadline, &w) < 0) {
        rdv_err(r, err, errlen, "entering the barrier: %s", w);
        return -1;
    }
    uint64_t n;
    return peer_expect(r, T_RELEASE, "the barrier's release", &n, deadline, err, errlen);
}

void rdv_close(Rendezvous *r) {
    if (!r) return;
    for (int i = 0; i < r->world; i++) close_fd(&r->fd[i]);
    free(r->fd);
    free(r);
}

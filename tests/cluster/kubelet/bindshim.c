/*
 * bindshim: an LD_PRELOAD library that gives a pod's processes their own loopback address.
 *
 * Every pod of the process kubelet shares this machine's network, and every TFJob replica listens on port
 * 2222 at the wildcard address: the second replica's bind fails ("Could not start gRPC server"). This
 * library moves a TCP socket's bind() to the wildcard address onto the pod's address, read once from
 * the variable POD_IP_ENV names (set by the kubelet, which also gives the name at compile time). An IPv4 wildcard becomes the pod address; a dual-stack IPv6
 * wildcard (IPV6_V6ONLY off) becomes the IPv4-mapped pod address, ::ffff:127.x.y.z, which keeps the socket,
 * its family, flags and options, and still accepts IPv4 connections to 127.x.y.z. Binds to a specific
 * address, IPv6-only sockets, UDP and other families pass through untouched.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifndef POD_IP_ENV
#error "compile with -DPOD_IP_ENV='\"NAME\"' (tests/cluster/kubelet/shim.py does)"
#endif

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind;
static struct in_addr pod_address;
static int have_pod_address;

__attribute__((constructor)) static void load(void) {
    real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *text = getenv(POD_IP_ENV);
    have_pod_address = text != NULL && inet_pton(AF_INET, text, &pod_address) == 1;
}

static int is_tcp(int fd) {
    int type = 0;
    socklen_t length = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type == SOCK_STREAM;
}

static int is_dual_stack(int fd) {
    int only = 1;
    socklen_t length = sizeof only;
    return getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, &length) == 0 && only == 0;
}

int bind(int fd, const struct sockaddr *address, socklen_t length) {
    if (real_bind == NULL) /* called before the constructor ran (another preloaded library's constructor) */
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (!have_pod_address || address == NULL || !is_tcp(fd))
        return real_bind(fd, address, length);
    if (address->sa_family == AF_INET && length >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in moved;
        memcpy(&moved, address, sizeof moved);
        if (moved.sin_addr.s_addr == htonl(INADDR_ANY)) {
            moved.sin_addr = pod_address;
            return real_bind(fd, (const struct sockaddr *)&moved, sizeof moved);
        }
    } else if (address->sa_family == AF_INET6 && length >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 moved;
        memcpy(&moved, address, sizeof moved);
        if (IN6_IS_ADDR_UNSPECIFIED(&moved.sin6_addr) && is_dual_stack(fd)) {
            memset(&moved.sin6_addr, 0, sizeof moved.sin6_addr);
            moved.sin6_addr.s6_addr[10] = 0xff;
            moved.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&moved.sin6_addr.s6_addr[12], &pod_address, sizeof pod_address);
            return real_bind(fd, (const struct sockaddr *)&moved, sizeof moved);
        }
    }
    return real_bind(fd, address, length);
}

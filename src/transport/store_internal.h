/* Inside the rendezvous store server: the state its two files share.
 * store_server.c holds the data and serves authenticated clients, one thread
 * each; store_accept.c accepts and handshakes arrivals in one poll loop. */
#ifndef DT_TRANSPORT_STORE_INTERNAL_H
#define DT_TRANSPORT_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/store.h"

#define DT__STORE_MAX_CLIENTS 4096 /* authenticated, a thread each */
#define DT__STORE_MAX_UNAUTH 512   /* handshakes at once; at the cap the oldest goes */

typedef struct {
    char *key;
    uint8_t *val;
    size_t len;
} entry;

typedef struct client {
    struct client *next;
    struct dt_store_server *srv;
    int fd;
    char peer[96];
} client;

struct dt_store_server {
    int listen_fd, port;
    char *token;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a key was set, a client ended, or stop */
    bool stopping;
    int nclients, refused; /* nclients: authenticated clients being served */
    int max_auth, max_unauth;
    client *clients;
    entry *entries;
    size_t nentries, cap;
};

/* The acceptor thread (store_accept.c). */
void *dt__store_acceptor_main(void *arg);
/* Serve fd, which proved the token, in a thread of its own; false (fd
 * untouched) when no thread could be had. */
bool dt__store_serve_client(dt_store_server *s, int fd, const char *peer);

#endif

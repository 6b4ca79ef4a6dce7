/* The running kernel's boot id: what tells one machine from another when
 * network namespaces or containers make several "hosts" of one machine
 * (they share its boot id, its cores and its memory). */
#ifndef DT_BASE_BOOT_ID_H
#define DT_BASE_BOOT_ID_H

#include <stddef.h>

/* /proc/sys/kernel/random/boot_id without its newline into out (len bytes);
 * "" when it cannot be read. */
void dt__boot_id(char *out, size_t len);

#endif

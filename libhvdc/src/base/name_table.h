/*
 * name_table.h - a map from operation names to pointers (separate chaining). Keys are not
 * copied: each key must stay valid while its entry is in the table (it lives in the value).
 * Removed nodes are kept for the next put: a rank's in-flight table sees a put and a remove per
 * operation, and in steady state they allocate nothing.
 * defines: hvdc_name_table, hvdc__name_hash, hvdc__name_table_init, _free, _get, _put, _remove,
 *          _remove_value (and _get/_put/_remove_value_hashed), _pop, _each
 * Not thread-safe; its owner locks.
 */
#ifndef HVDC_NAME_TABLE_H
#define HVDC_NAME_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct hvdc_name_node hvdc_name_node;

typedef struct hvdc_name_table {
    hvdc_name_node **buckets; /* (n_buckets) */
    size_t n_buckets;
    size_t count;
    hvdc_name_node *spare;    /* removed nodes, for reuse by put */
} hvdc_name_table;

/* The hash a key is filed under. A caller that looks one name up several times takes it once
 * and passes it to the _hashed calls, which are the plain ones without the hashing. */
uint64_t hvdc__name_hash(const char *key);

void hvdc__name_table_init(hvdc_name_table *table);
void hvdc__name_table_free(hvdc_name_table *table);
void *hvdc__name_table_get(const hvdc_name_table *table, const char *key);
/* @return 0 on success, -1 if the key is present already, -2 if out of memory. */
int hvdc__name_table_put(hvdc_name_table *table, const char *key, void *value);
int hvdc__name_table_put_hashed(hvdc_name_table *table, const char *key, uint64_t hash, void *value);
void *hvdc__name_table_get_hashed(const hvdc_name_table *table, const char *key, uint64_t hash);
/* @return the removed value, or NULL if absent. */
void *hvdc__name_table_remove(hvdc_name_table *table, const char *key);
/* Removes key only where it maps to value. @return 1 if it did. */
int hvdc__name_table_remove_value(hvdc_name_table *table, const char *key, const void *value);
int hvdc__name_table_remove_value_hashed(hvdc_name_table *table, const char *key, uint64_t hash,
                                         const void *value);
/* Calls fn on every entry (the table must not change meanwhile). */
void hvdc__name_table_each(const hvdc_name_table *table, void (*fn)(void *value, void *ctx), void *ctx);
/* Removes and returns any one value, or NULL when empty (for draining at shutdown). */
void *hvdc__name_table_pop(hvdc_name_table *table);

#endif

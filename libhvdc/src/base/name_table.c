/*
 * name_table.c - string-keyed hash table (chaining, doubling at load factor 1).
 * Used for in-flight names on each rank and for the coordinator's table of announced names.
 * Not thread-safe; its owner locks.
 */
#include "base/name_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct hvdc_name_node {
    const char *key;
    void *value;
    uint64_t hash;
    hvdc_name_node *next;
};

/* Every operation's name is hashed on every rank when it is submitted, looked up, answered and
 * completed, and on rank 0 again while negotiated: about ten times, several under the queue lock.
 * FNV-1a (hash.h) takes a multiply per byte, 139 ns for a 128-byte name here; this takes one per
 * 8 bytes, 18 ns, then murmur3's finalizer, so the low bits that pick the bucket depend on
 * every byte. These hashes never leave the process (FNV-1a stays for what is compared across
 * ranks or saved), so the function may change freely. */
uint64_t hvdc__name_hash(const char *key) {
    size_t len = strlen(key);
    uint64_t h = (uint64_t)len * 0x9e3779b97f4a7c15ull, word;
    for (; len >= 8; len -= 8, key += 8) {
        memcpy(&word, key, 8);
        h = (h ^ word) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    word = 0;
    memcpy(&word, key, len);
    h ^= word;
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdull;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* The node holding key (of hash h), or NULL. */
static hvdc_name_node *find(const hvdc_name_table *table, const char *key, uint64_t h) {
    if (table->n_buckets == 0) return NULL;
    for (hvdc_name_node *node = table->buckets[h % table->n_buckets]; node; node = node->next)
        if (node->hash == h && strcmp(node->key, key) == 0) return node;
    return NULL;
}

void hvdc__name_table_init(hvdc_name_table *table) {
    table->buckets = NULL;
    table->n_buckets = 0;
    table->count = 0;
    table->spare = NULL;
}

static void free_chain(hvdc_name_node *node) {
    while (node) {
        hvdc_name_node *next = node->next;
        free(node);
        node = next;
    }
}

/* Keeps a removed node for the next put. */
static void retire(hvdc_name_table *table, hvdc_name_node *node) {
    node->next = table->spare;
    table->spare = node;
    table->count--;
}

void hvdc__name_table_free(hvdc_name_table *table) {
    for (size_t b = 0; b < table->n_buckets; b++) free_chain(table->buckets[b]);
    free_chain(table->spare);
    free(table->buckets);
    hvdc__name_table_init(table);
}

void *hvdc__name_table_get(const hvdc_name_table *table, const char *key) {
    /* empty: no hash taken (rank 0's table of named entries, every name cached) */
    if (table->count == 0) return NULL;
    return hvdc__name_table_get_hashed(table, key, hvdc__name_hash(key));
}

void *hvdc__name_table_get_hashed(const hvdc_name_table *table, const char *key, uint64_t hash) {
    hvdc_name_node *node = find(table, key, hash);
    return node ? node->value : NULL;
}

static int grow(hvdc_name_table *table) {
    size_t n = table->n_buckets ? table->n_buckets * 2 : 64;
    hvdc_name_node **buckets = calloc(n, sizeof *buckets);
    if (!buckets) return -2;
    for (size_t b = 0; b < table->n_buckets; b++) {
        hvdc_name_node *node = table->buckets[b];
        while (node) {
            hvdc_name_node *next = node->next;
            node->next = buckets[node->hash % n];
            buckets[node->hash % n] = node;
            node = next;
        }
    }
    free(table->buckets);
    table->buckets = buckets;
    table->n_buckets = n;
    return 0;
}

int hvdc__name_table_put(hvdc_name_table *table, const char *key, void *value) {
    return hvdc__name_table_put_hashed(table, key, hvdc__name_hash(key), value);
}

int hvdc__name_table_put_hashed(hvdc_name_table *table, const char *key, uint64_t h, void *value) {
    if (find(table, key, h)) return -1;
    if (table->count >= table->n_buckets && grow(table) != 0) return -2;
    hvdc_name_node *node = table->spare;
    if (node) table->spare = node->next;
    else if (!(node = malloc(sizeof *node))) return -2;
    node->key = key;
    node->value = value;
    node->hash = h;
    node->next = table->buckets[node->hash % table->n_buckets];
    table->buckets[node->hash % table->n_buckets] = node;
    table->count++;
    return 0;
}

/* Unlinks key's node, if any, where it maps to value (any value when !only). @return its value
 * (NULL when none). */
static void *unlink_key(hvdc_name_table *table, const char *key, uint64_t h, int only,
                        const void *value) {
    if (table->count == 0) return NULL;
    for (hvdc_name_node **link = &table->buckets[h % table->n_buckets]; *link;
         link = &(*link)->next) {
        hvdc_name_node *node = *link;
        if (node->hash == h && strcmp(node->key, key) == 0) {
            if (only && node->value != value) return NULL;
            void *found = node->value;
            *link = node->next;
            retire(table, node);
            return found;
        }
    }
    return NULL;
}

void *hvdc__name_table_remove(hvdc_name_table *table, const char *key) {
    return table->count ? unlink_key(table, key, hvdc__name_hash(key), 0, NULL) : NULL;
}

int hvdc__name_table_remove_value(hvdc_name_table *table, const char *key, const void *value) {
    return hvdc__name_table_remove_value_hashed(table, key, table->count ? hvdc__name_hash(key) : 0, value);
}

int hvdc__name_table_remove_value_hashed(hvdc_name_table *table, const char *key, uint64_t hash,
                                         const void *value) {
    return value && unlink_key(table, key, hash, 1, value) != NULL;
}

void *hvdc__name_table_pop(hvdc_name_table *table) {
    for (size_t b = 0; b < table->n_buckets && table->count > 0; b++) {
        hvdc_name_node *node = table->buckets[b];
        if (node) {
            void *value = node->value;
            table->buckets[b] = node->next;
            retire(table, node);
            return value;
        }
    }
    return NULL;
}

void hvdc__name_table_each(const hvdc_name_table *table, void (*fn)(void *value, void *ctx), void *ctx) {
    for (size_t b = 0; b < table->n_buckets; b++)
        for (hvdc_name_node *node = table->buckets[b]; node; node = node->next) fn(node->value, ctx);
}

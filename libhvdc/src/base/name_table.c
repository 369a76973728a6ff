/*
 * name_table.c - string-keyed hash table (FNV-1a, chaining, doubling at load factor 1).
 * Used for in-flight names on each rank and for the coordinator's table of announced names.
 * Not thread-safe; its owner locks.
 */
#include "base/name_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

struct hvdc_name_node {
    const char *key;
    void *value;
    uint64_t hash;
    hvdc_name_node *next;
};

static uint64_t hash_name(const char *key) { return hvdc__fnv1a_string(HVDC_FNV_OFFSET, key, 0); }

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
    if (table->n_buckets == 0) return NULL;
    uint64_t h = hash_name(key);
    for (hvdc_name_node *node = table->buckets[h % table->n_buckets]; node; node = node->next) {
        if (node->hash == h && strcmp(node->key, key) == 0) return node->value;
    }
    return NULL;
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
    if (hvdc__name_table_get(table, key)) return -1;
    if (table->count >= table->n_buckets && grow(table) != 0) return -2;
    hvdc_name_node *node = table->spare;
    if (node) table->spare = node->next;
    else if (!(node = malloc(sizeof *node))) return -2;
    node->key = key;
    node->value = value;
    node->hash = hash_name(key);
    node->next = table->buckets[node->hash % table->n_buckets];
    table->buckets[node->hash % table->n_buckets] = node;
    table->count++;
    return 0;
}

void *hvdc__name_table_remove(hvdc_name_table *table, const char *key) {
    if (table->n_buckets == 0) return NULL;
    uint64_t h = hash_name(key);
    for (hvdc_name_node **link = &table->buckets[h % table->n_buckets]; *link;
         link = &(*link)->next) {
        hvdc_name_node *node = *link;
        if (node->hash == h && strcmp(node->key, key) == 0) {
            void *value = node->value;
            *link = node->next;
            retire(table, node);
            return value;
        }
    }
    return NULL;
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

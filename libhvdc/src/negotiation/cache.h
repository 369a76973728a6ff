/*
 * cache.h - the response cache: all-reduces that ran before, each in a numbered slot that is
 * the same on every rank, so that in steady state a rank announces a tensor with its slot
 * number (4 bytes) instead of its whole request, and rank 0 answers with slot numbers too.
 * Bytes per round then no longer grow with name lengths, and rank 0 tracks cached tensors in a
 * per-slot table instead of per-name entries (negotiate.c).
 *
 * Every rank inserts the same names in the same order: after it executes a response, the
 * all-reduces of that response (negotiated as named requests, executed on every rank, none
 * joined), in response order (background.c). A name already cached keeps its slot and takes
 * the new request. A full cache caches nothing more (no eviction: which slots other ranks
 * still have pending is known only to rank 0). Each rank caches its own request (device
 * ordinals may differ between ranks); it announces a slot only when its new request is
 * exactly the cached one, else it sends the full request, and rank 0 reconciles the two.
 * HVD_CACHE_CAPACITY (Horovod's HOROVOD_CACHE_CAPACITY) sets the slots; 0 turns it off.
 *
 * defines: hvdc_cache, hvdc__cache_create, hvdc__cache_destroy, hvdc__cache_find,
 *          hvdc__cache_lookup, hvdc__cache_put, hvdc__cache_name, hvdc__cache_request,
 *          hvdc__cache_capacity, hvdc__cache_cacheable, hvdc__cache_first_missing,
 *          hvdc__cache_fill_names, hvdc__cache_peek
 * Background thread only; but hvdc__cache_peek, which writes nothing, also from a thread that
 * holds the runtime's executor token (runtime/caller_path.h): the background thread holds it
 * whenever it changes the cache's contents (hvdc__cache_put).
 */
#ifndef HVDC_CACHE_H
#define HVDC_CACHE_H

#include <stdint.h>

#include "hvdc.h"
#include "negotiation/wire.h"

typedef struct hvdc_cache hvdc_cache;

/* @return a cache of capacity slots (0: a cache that holds nothing), or NULL out of memory. */
hvdc_cache *hvdc__cache_create(uint32_t capacity);
void hvdc__cache_destroy(hvdc_cache *cache); /* NULL-safe */

uint32_t hvdc__cache_capacity(const hvdc_cache *cache);

/* May a request of this kind be cached? (All-reduces: the steady-state traffic.) */
int hvdc__cache_cacheable(const hvdc_wire_request *request);

/* The slot of name, or -1 (whatever its request). */
int64_t hvdc__cache_find(const hvdc_cache *cache, const char *name);

/* The slot holding exactly this request (same name and every field), or -1. Fastest when
 * requests come in slot order (it remembers where the last one was). */
int64_t hvdc__cache_lookup(hvdc_cache *cache, const hvdc_wire_request *request);

/* hvdc__cache_lookup, but writing nothing (not even where the last hit was). */
int64_t hvdc__cache_peek(const hvdc_cache *cache, const hvdc_wire_request *request);

/* Caches request under its name: its slot if the name is cached (the request replaces the
 * old one), else the next free slot. @return the slot, or -1 when the cache is full (then
 * nothing changed). Out of memory, the slot is still taken but never matches (slot numbers
 * must advance alike on every rank). */
int64_t hvdc__cache_put(hvdc_cache *cache, const hvdc_wire_request *request);

/* The name and request in slot (NULL for a slot never filled). */
const char *hvdc__cache_name(const hvdc_cache *cache, uint32_t slot);
const hvdc_wire_request *hvdc__cache_request(const hvdc_cache *cache, uint32_t slot);

/* The index in slots[0..n) of the first slot the cache does not hold, or n. */
uint32_t hvdc__cache_first_missing(const hvdc_cache *cache, const uint32_t *slots, uint32_t n);

/* Fills a received cached response's names after the first (the exchange fills only that
 * one: a steady-state response is run by its slots) from the cache, which must hold every
 * slot (hvdc__cache_first_missing). Does nothing for a named response, or a second time. */
void hvdc__cache_fill_names(const hvdc_cache *cache, hvdc_wire_response *response);

#endif

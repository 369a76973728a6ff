/* Unit test: the name table (base/name_table.h): put, get, remove, pop, growth, and the reuse
 * of removed nodes, which keeps a rank's in-flight table from allocating in steady state. */
#include <stdio.h>
#include <string.h>

#include "base/name_table.h"
#include "check.h"
#include "hvdc.h"

int main(void) {
    hvdc_name_table t;
    hvdc__name_table_init(&t);
    static char keys[200][16];
    static int values[200];
    for (int i = 0; i < 200; i++) snprintf(keys[i], sizeof keys[i], "grad.%d", i);

    CHECK_TRUE(hvdc__name_table_get(&t, "grad.0") == NULL, "empty table finds nothing");
    for (int i = 0; i < 200; i++) /* past 64 buckets: the table grows twice */
        CHECK_TRUE(hvdc__name_table_put(&t, keys[i], &values[i]) == 0, "put %d", i);
    CHECK_TRUE(t.count == 200 && t.n_buckets >= 200, "count %zu, buckets %zu", t.count, t.n_buckets);
    CHECK_TRUE(hvdc__name_table_put(&t, "grad.7", &values[0]) == -1, "a duplicate is refused");
    int found = 0;
    for (int i = 0; i < 200; i++) found += hvdc__name_table_get(&t, keys[i]) == &values[i];
    CHECK_TRUE(found == 200, "every key maps to its value after growing: %d of 200", found);

    /* removed nodes are reused: a put after a remove takes the node back */
    CHECK_TRUE(hvdc__name_table_remove(&t, "grad.5") == &values[5], "remove returns the value");
    CHECK_TRUE(hvdc__name_table_remove(&t, "grad.5") == NULL && t.count == 199, "removed once");
    CHECK_TRUE(t.spare != NULL, "the removed node is kept");
    CHECK_TRUE(hvdc__name_table_put(&t, keys[5], &values[6]) == 0 && t.spare == NULL, "and reused");
    CHECK_TRUE(hvdc__name_table_get(&t, "grad.5") == &values[6], "the reused node holds the new value");

    /* many rounds of submit and complete (put, then remove) reuse the same few nodes */
    for (int round = 0; round < 1000; round++) {
        hvdc__name_table_remove(&t, keys[round % 200]);
        CHECK_TRUE(hvdc__name_table_put(&t, keys[round % 200], &values[0]) == 0, "round %d", round);
    }
    CHECK_TRUE(t.count == 200 && t.spare == NULL, "steady state: count %zu", t.count);

    /* remove_value: only where the key maps to that value */
    CHECK_TRUE(hvdc__name_table_remove_value(&t, "grad.9", &values[8]) == 0 &&
                   hvdc__name_table_get(&t, "grad.9") != NULL, "another value: kept");
    CHECK_TRUE(hvdc__name_table_remove_value(&t, "grad.9", &values[0]) == 1 &&
                   hvdc__name_table_get(&t, "grad.9") == NULL && t.count == 199, "its value: removed");
    CHECK_TRUE(hvdc__name_table_remove_value(&t, "grad.9", &values[0]) == 0, "absent: nothing");
    CHECK_TRUE(hvdc__name_table_put(&t, keys[9], &values[0]) == 0, "put back");

    /* the _hashed calls, given hvdc__name_hash's value, are the plain ones */
    uint64_t h9 = hvdc__name_hash("grad.9");
    CHECK_TRUE(h9 == hvdc__name_hash(keys[9]), "the hash depends on the name only");
    CHECK_TRUE(hvdc__name_table_get_hashed(&t, "grad.9", h9) == &values[0], "get_hashed finds it");
    CHECK_TRUE(hvdc__name_table_put_hashed(&t, keys[9], h9, &values[1]) == -1, "put_hashed refuses a duplicate");
    CHECK_TRUE(hvdc__name_table_remove_value_hashed(&t, "grad.9", h9, &values[1]) == 0 &&
                   hvdc__name_table_remove_value_hashed(&t, "grad.9", h9, &values[0]) == 1 &&
                   hvdc__name_table_get(&t, "grad.9") == NULL, "remove_value_hashed: its value only");
    CHECK_TRUE(hvdc__name_table_put_hashed(&t, keys[9], h9, &values[0]) == 0 &&
                   hvdc__name_table_get(&t, "grad.9") == &values[0], "put_hashed: the plain get finds it");

    int popped = 0;
    while (hvdc__name_table_pop(&t)) popped++;
    CHECK_TRUE(popped == 200 && t.count == 0, "pop drains every entry: %d", popped);
    CHECK_TRUE(hvdc__name_table_get(&t, "grad.1") == NULL, "drained table finds nothing");
    hvdc__name_table_free(&t); /* frees the spare nodes too (ASan counts leaks) */
    CHECK_TRUE(t.buckets == NULL && t.spare == NULL && t.count == 0, "free leaves an empty table");

    /* long names as frameworks make them: every length up to the limit (each tail length of the
     * 8-byte hash), names that differ only in their last byte or only in the middle of a long
     * common prefix; and the buckets they fall into are spread (a hash whose low bits missed
     * some bytes would crowd such names into few buckets) */
    enum { N_LONG = 1024 };
    static char names[N_LONG][HVD_MAX_NAME_LEN + 1];
    for (int i = 0; i < N_LONG; i++) {
        int len = i % 4 == 0 ? i / 4 % (HVD_MAX_NAME_LEN + 1) : 120;
        memset(names[i], 'x', (size_t)len);
        names[i][len] = '\0';
        if (len > 0 && i % 4 == 1) names[i][len - 1] = (char)('A' + i / 4 % 60); /* last byte */
        if (i % 4 >= 2) snprintf(names[i] + 40, 12, "%05d", i), names[i][45] = '.'; /* middle */
    }
    int put_long = 0, got_long = 0;
    for (int i = 0; i < N_LONG; i++) {
        int st = hvdc__name_table_put(&t, names[i], names[i]);
        put_long += st == 0 || (st == -1 && hvdc__name_table_get(&t, names[i]) != names[i]);
    }
    for (int i = 0; i < N_LONG; i++) {
        const char *v = hvdc__name_table_get(&t, names[i]);
        got_long += v != NULL && strcmp(v, names[i]) == 0;
    }
    CHECK_TRUE(put_long == N_LONG && got_long == N_LONG, "long names: %d put, %d found", put_long,
               got_long);
    size_t used = 0;
    for (size_t b = 0; b < t.n_buckets; b++) used += t.buckets[b] != NULL;
    CHECK_TRUE(used * 2 > t.count, "%zu distinct names spread over %zu of %zu buckets", t.count,
               used, t.n_buckets);
    hvdc__name_table_free(&t);
    return check_verdict("name table");
}

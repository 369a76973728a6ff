/* Unit test: the name table (base/name_table.h): put, get, remove, pop, growth, and the reuse
 * of removed nodes, which keeps a rank's in-flight table from allocating in steady state. */
#include <stdio.h>

#include "base/name_table.h"
#include "check.h"

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

    int popped = 0;
    while (hvdc__name_table_pop(&t)) popped++;
    CHECK_TRUE(popped == 200 && t.count == 0, "pop drains every entry: %d", popped);
    CHECK_TRUE(hvdc__name_table_get(&t, "grad.1") == NULL, "drained table finds nothing");
    hvdc__name_table_free(&t); /* frees the spare nodes too (ASan counts leaks) */
    CHECK_TRUE(t.buckets == NULL && t.spare == NULL && t.count == 0, "free leaves an empty table");
    return check_verdict("name table");
}

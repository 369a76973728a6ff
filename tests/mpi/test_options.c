/*
 * test_options.c - hvd_options carries its size (hvdc.h): a program built with this header,
 * an older one's field-by-field initializer (struct_size 0) and the old name HVD_OPTIONS_DEFAULT
 * all work; a size smaller than any hvd_options is refused (HVD_ERR_INVALID_ARG); a newer
 * header's larger struct is accepted while the fields this library does not know are zero,
 * refused (HVD_ERR_UNSUPPORTED) once one is set. Each refusal happens at submission, on the
 * caller's rank, with a message naming the call and the tensor.
 * Usage: test_options          (any np; every rank runs the same calls)
 * Main thread only.
 */
#include <stdio.h>
#include <string.h>

#include "mpitest.h"

/* What a program built with a later hvdc.h would pass: this struct, then fields it added. */
typedef struct newer_options {
    hvd_options known;
    double added[2];
} newer_options;

/* An all-reduce of rank + 1 with options o: its status, and the sum checked when it ran. */
static hvd_status sum_with(mt_ctx *t, const char *name, const hvd_options *o) {
    float x = (float)(t->rank + 1);
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = hvd_allreduce_async(name, &x, &x, 1, HVD_FLOAT32, HVD_SUM, o, &h);
    if (st != HVD_OK) return st;
    st = hvd_wait(&h);
    MT_CHECK(t, st != HVD_OK || x == (float)(t->size * (t->size + 1) / 2), "%s: sum %g", name, x);
    return st;
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;

    mt_begin(&t, "HVD_OPTIONS_INIT, its old name and a field-by-field initializer work");
    const hvd_options init = HVD_OPTIONS_INIT, old_name = HVD_OPTIONS_DEFAULT;
    const hvd_options fields = {.prescale = 1.0, .postscale = 1.0, .device = HVD_DEVICE_CPU};
    MT_CHECK(&t, init.struct_size == sizeof(hvd_options), "HVD_OPTIONS_INIT sets struct_size %zu",
             init.struct_size);
    MT_EXPECT(&t, sum_with(&t, "options.init", &init), HVD_OK);
    MT_EXPECT(&t, sum_with(&t, "options.old_name", &old_name), HVD_OK);
    MT_EXPECT(&t, sum_with(&t, "options.fields", &fields), HVD_OK);
    mt_end(&t);

    mt_begin(&t, "a size smaller than any hvd_options is refused, naming the call");
    hvd_options small = HVD_OPTIONS_INIT;
    small.struct_size = sizeof small - sizeof(int);
    MT_EXPECT(&t, sum_with(&t, "options.small", &small), HVD_ERR_INVALID_ARG);
    MT_CHECK(&t, strstr(hvd_last_error(), "'options.small'") && strstr(hvd_last_error(), "HVD_OPTIONS_INIT"),
             "message: %s", hvd_last_error());
    mt_end(&t);

    mt_begin(&t, "a newer header's larger options: fields unknown here zero, accepted; set, refused");
    newer_options newer;
    memset(&newer, 0, sizeof newer);
    newer.known = (hvd_options)HVD_OPTIONS_INIT;
    newer.known.struct_size = sizeof newer;
    MT_EXPECT(&t, sum_with(&t, "options.newer", &newer.known), HVD_OK);
    newer.added[1] = 2.0;
    MT_EXPECT(&t, sum_with(&t, "options.newer_set", &newer.known), HVD_ERR_UNSUPPORTED);
    MT_CHECK(&t, strstr(hvd_last_error(), "'options.newer_set'") && strstr(hvd_last_error(), "does not know"),
             "message: %s", hvd_last_error());
    mt_end(&t);

    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}

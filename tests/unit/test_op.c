/*
 * Unit test: the handle table and the recycling of one-tensor ops (runtime/op.h).
 *   - handles: a released handle no longer finds its op, and its slot's next handle differs
 *   - a recycled op comes back to the thread that took it as a spare, as new: zeroed, its
 *     counts in its own room, what it owned freed (ASan's leak check sees a miss)
 *   - ops of several tensors are freed, not kept; an op of several tensors leaves the spare
 *   - a thread holds one spare at most; the table keeps HVDC_MAX_SPARE_OPS at most
 *   - a thread that exits with a spare frees it, and the table frees its spares (both: ASan's
 *     leak check, in the sanitizer stage, which runs every unit test)
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/op.h"

static void test_handles(void) {
    hvdc_handles h;
    hvdc__handles_init(&h);
    hvdc_op *a = hvdc__op_create(1);
    hvd_handle ha = hvdc__handles_add(&h, a);
    CHECK_TRUE(hvdc__handles_find(&h, ha) == a, "the handle finds its op");
    hvdc__handles_remove(&h, ha);
    CHECK_TRUE(hvdc__handles_find(&h, ha) == NULL, "a released handle finds nothing");
    hvd_handle hb = hvdc__handles_add(&h, a);
    CHECK_TRUE(hb != ha && hvdc__handles_find(&h, ha) == NULL, "the slot's next handle differs");
    hvdc__handles_free(&h); /* frees a */
}

static hvdc_op *used_op(void) {
    hvdc_op *op = hvdc__op_create(1);
    size_t count = 7;
    hvdc__op_set_counts(op, &count, 1);
    strcpy(op->desc.name, "grad.w");
    op->error = strdup("an error it owns");
    op->desc.shape = malloc(2 * sizeof *op->desc.shape);
    op->desc.ndim = 2;
    op->desc.has_shape = 1;
    op->done = 1;
    op->status = HVD_ERR_MISMATCH;
    op->desc.prescale = 0.5;
    op->phase_at[HVDC_PHASE_QUEUED] = 42;
    return op;
}

static void test_recycled_op_is_new(void) {
    hvdc_handles h;
    hvdc__handles_init(&h);
    hvdc_op *op = used_op();
    hvdc__op_recycle(&h, op);
    CHECK_TRUE(h.n_spare == 1, "a one-tensor op is kept (%u spares)", h.n_spare);
    hvdc__op_take_spare(&h);
    CHECK_TRUE(h.n_spare == 0, "the thread took the spare (%u left)", h.n_spare);
    hvdc_op *many = hvdc__op_create(3); /* not from the spare */
    CHECK_TRUE(many != op, "an op of 3 tensors does not take the one-tensor spare");
    hvdc_op *again = hvdc__op_create(1);
    CHECK_TRUE(again == op, "the next one-tensor op is the recycled one");
    CHECK_TRUE(again->error == NULL && again->desc.shape == NULL && !again->desc.has_shape &&
               again->desc.ndim == 0, "nothing owned is left");
    CHECK_TRUE(again->done == 0 && again->status == HVD_OK && again->phase_at[HVDC_PHASE_QUEUED] == 0,
               "completion state is new");
    CHECK_TRUE(again->desc.prescale == 1.0 && again->desc.device == HVD_DEVICE_CPU &&
               again->n_tensors == 1 && again->desc.n_counts == 0,
               "defaults as hvdc__op_create sets them");
    CHECK_TRUE(again->desc.counts == (uint64_t *)(again->tensors + 1) &&
               again->tensors == (hvdc_tensor *)(again + 1), "tensors and counts in its own room");
    hvdc__op_recycle(&h, many);
    CHECK_TRUE(h.n_spare == 0, "an op of 3 tensors is freed, not kept");
    hvdc__op_free(again);
    hvdc__handles_free(&h);
}

static void test_bounds(void) {
    hvdc_handles h;
    hvdc__handles_init(&h);
    hvdc__op_recycle(&h, NULL);
    CHECK_TRUE(h.n_spare == 0, "NULL is nothing to recycle");
    for (unsigned i = 0; i < HVDC_MAX_SPARE_OPS + 5; i++) hvdc__op_recycle(&h, hvdc__op_create(1));
    CHECK_TRUE(h.n_spare == HVDC_MAX_SPARE_OPS, "the table keeps %u spares at most (kept %u)",
               HVDC_MAX_SPARE_OPS, h.n_spare);
    hvdc__op_take_spare(&h);
    hvdc__op_take_spare(&h);
    CHECK_TRUE(h.n_spare == HVDC_MAX_SPARE_OPS - 1, "a thread takes one spare at most (%u left)",
               h.n_spare);
    hvdc__op_free(hvdc__op_create(1)); /* uses up this thread's spare */
    hvdc__handles_free(&h);
    CHECK_TRUE(h.n_spare == 0 && h.spare_ops == NULL, "the table's spares are freed with it");
}

static void *take_and_exit(void *arg) {
    hvdc__op_take_spare(arg); /* never used: the thread's exit frees it */
    return NULL;
}

static void test_thread_exit(void) {
    hvdc_handles h;
    hvdc__handles_init(&h);
    hvdc__op_recycle(&h, hvdc__op_create(1));
    pthread_t t;
    pthread_create(&t, NULL, take_and_exit, &h);
    pthread_join(t, NULL);
    CHECK_TRUE(h.n_spare == 0, "the exiting thread took the spare");
    hvdc__handles_free(&h);
}

int main(void) {
    test_handles();
    test_recycled_op_is_new();
    test_bounds();
    test_thread_exit();
    return check_verdict("test_op");
}

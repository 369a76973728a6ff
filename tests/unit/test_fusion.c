/* Unit test: the host packing plan (which tensors are packed, where, which stay in place). */
#include "check.h"
#include "collectives/fusion.h"

int main(void) {
    hvdc_pack_plan plan = {0};
    /* float32: 10, 3 and 5 elements pack together, aligned to 16 elements (64 bytes) */
    size_t small[3] = {10, 3, 5};
    CHECK_TRUE(hvdc__pack_plan_make(small, 3, 4, 1 << 20, 1 << 20, &plan) == HVD_OK, "plan");
    CHECK_TRUE(plan.n_pieces == 1 && !plan.pieces[0].in_place && plan.pieces[0].n == 3, "one packed piece");
    CHECK_TRUE(plan.offsets[0] == 0 && plan.offsets[1] == 16 && plan.offsets[2] == 32, "aligned offsets");
    CHECK_TRUE(plan.pieces[0].count == 37, "piece spans 37 elements, got %zu", plan.pieces[0].count);
    hvdc__pack_plan_free(&plan);

    /* a large tensor splits the run and stays in place; a lone small one is in place too */
    size_t mixed[4] = {100, 100, 1 << 20, 100};
    CHECK_TRUE(hvdc__pack_plan_make(mixed, 4, 4, 1 << 20, 1 << 20, &plan) == HVD_OK, "plan");
    CHECK_TRUE(plan.n_pieces == 3, "3 pieces, got %zu", plan.n_pieces);
    CHECK_TRUE(plan.pieces[0].n == 2 && !plan.pieces[0].in_place, "packed pair");
    CHECK_TRUE(plan.pieces[1].first == 2 && plan.pieces[1].in_place, "large in place");
    CHECK_TRUE(plan.pieces[2].first == 3 && plan.pieces[2].in_place, "lone small in place");
    hvdc__pack_plan_free(&plan);

    /* pieces never exceed piece_bytes: 10 tensors of 100 floats into 1 KiB pieces (256 floats) */
    size_t many[10];
    for (int i = 0; i < 10; i++) many[i] = 100;
    CHECK_TRUE(hvdc__pack_plan_make(many, 10, 4, 1024, 1 << 20, &plan) == HVD_OK, "plan");
    size_t covered = 0;
    for (size_t p = 0; p < plan.n_pieces; p++) {
        CHECK_TRUE(plan.pieces[p].in_place || plan.pieces[p].count * 4 <= 1024, "piece %zu fits", p);
        covered += plan.pieces[p].n;
    }
    CHECK_TRUE(plan.n_pieces == 5 && covered == 10, "5 pieces of two, got %zu", plan.n_pieces);
    hvdc__pack_plan_free(&plan);

    /* threshold 0: everything in place; count 0 tensors are harmless */
    size_t zeros[2] = {0, 0};
    CHECK_TRUE(hvdc__pack_plan_make(zeros, 2, 8, 0, 1 << 20, &plan) == HVD_OK, "plan");
    CHECK_TRUE(plan.n_pieces == 2 && plan.pieces[0].in_place && plan.pieces[1].in_place, "no packing at 0");
    hvdc__pack_plan_free(&plan);

    /* one plan made again and again (as the executor does) keeps its arrays and gives what a
     * fresh plan gives: a packed run after 10 tensors, then a large one in place after it */
    CHECK_TRUE(hvdc__pack_plan_make(many, 10, 4, 1024, 1 << 20, &plan) == HVD_OK, "plan");
    const hvdc_pack_piece *pieces = plan.pieces;
    CHECK_TRUE(hvdc__pack_plan_make(small, 3, 4, 1 << 20, 1 << 20, &plan) == HVD_OK, "plan again");
    CHECK_TRUE(plan.pieces == pieces, "arrays kept");
    CHECK_TRUE(plan.n_pieces == 1 && plan.pieces[0].n == 3 && plan.offsets[2] == 32 &&
               plan.pieces[0].count == 37, "same plan as a fresh one");
    size_t after_packed[3] = {10, 1 << 20, 3}; /* offsets[1] held 16 from the plan before */
    CHECK_TRUE(hvdc__pack_plan_make(after_packed, 3, 4, 1 << 20, 1 << 20, &plan) == HVD_OK, "plan");
    CHECK_TRUE(plan.n_pieces == 3 && plan.pieces[1].in_place && plan.offsets[1] == 0,
               "large tensor in place at offset 0, got %zu pieces, offset %zu", plan.n_pieces, plan.offsets[1]);
    size_t more[40];
    for (int i = 0; i < 40; i++) more[i] = 1; /* more than the room the 10 tensors above left */
    CHECK_TRUE(hvdc__pack_plan_make(more, 40, 4, 1 << 20, 1 << 20, &plan) == HVD_OK &&
               plan.offsets_room.bytes >= 40 * sizeof(size_t) && plan.n_pieces == 1 &&
               plan.pieces[0].n == 40 && plan.offsets[39] == 39 * 16, "grows for more tensors");
    hvdc__pack_plan_free(&plan);
    CHECK_TRUE(plan.pieces == NULL && plan.pieces_room.data == NULL && plan.offsets_room.data == NULL,
               "free releases the arrays");
    return check_verdict("fusion plan");
}

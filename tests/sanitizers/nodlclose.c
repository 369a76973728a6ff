/*
 * nodlclose.c - preloaded (LD_PRELOAD) into the ranks of the ASan stage only: dlclose does
 * nothing, so Open MPI's plugins (mca_*.so), which MPI_Finalize unloads, are still mapped when
 * LeakSanitizer symbolizes at exit. Without it their frames print as "<unknown module>" and no
 * suppression in lsan.supp can name them. Open MPI 4.1 has no MCA parameter for this.
 *
 * defines: dlclose
 */
int dlclose(void *handle);

int dlclose(void *handle) {
    (void)handle;
    return 0;
}

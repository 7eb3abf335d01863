/*
 * check_main - runs every integration suite against the real binary. The list
 * comes from the file names (build/tests/isuites.inc, made by the Makefile):
 * tests/integration/check_<m>.c exports `Suite *<m>_suite(void)`.
 * CK_RUN_SUITE=<name> runs one suite (Check's own).
 */
#include <check.h>
#include <curl/curl.h>
#include <stdlib.h>

#define SUITE(m) Suite *m##_suite(void);
#include "isuites.inc"
#undef SUITE

int main(void)
{
    SRunner *sr = srunner_create(NULL);
    int failed;

    curl_global_init(CURL_GLOBAL_DEFAULT);
#define SUITE(m) srunner_add_suite(sr, m##_suite());
#include "isuites.inc"
#undef SUITE
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    curl_global_cleanup();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

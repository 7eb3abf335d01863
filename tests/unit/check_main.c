/*
 * check_main - runs every unit suite. The list comes from the file names
 * (build/tests/suites.inc, made by the Makefile): tests/unit/check_<m>.c exports
 * `Suite *<m>_suite(void)`. CK_RUN_SUITE=<name> runs one suite (Check's own).
 */
#include <check.h>
#include <stdlib.h>

#define SUITE(m) Suite *m##_suite(void);
#include "suites.inc"
#undef SUITE

int main(void)
{
    SRunner *sr = srunner_create(NULL);
    int failed;

#define SUITE(m) srunner_add_suite(sr, m##_suite());
#include "suites.inc"
#undef SUITE
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

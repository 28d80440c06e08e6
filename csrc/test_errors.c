/*
 * test_errors.c -- qs_strerror's table: every code from QS_NOTFOUND to
 * QS_LAST_ERRCODE has its own text, codes outside the range and errno
 * values are told apart.  (A code added without a text already stops the
 * build: errors.c asserts the table's size; this finds a gap inside it.)
 */
#include "test_common.h"

static void every_code_has_its_own_text(void)
{
    const char *unknown = qs_strerror(QS_LAST_ERRCODE - 1);
    CHECK(strcmp(unknown, "unknown error") == 0);
    CHECK(strcmp(qs_strerror(QS_NOTFOUND + 1), unknown) == 0);
    CHECK(strcmp(qs_strerror(INT32_MIN), unknown) == 0);
    for (int rc = QS_NOTFOUND; rc >= QS_LAST_ERRCODE; rc--) {
        const char *text = qs_strerror(rc);
        REQUIRE(text != NULL);
        if (strcmp(text, unknown) == 0 || !*text)
            printf("  code %d has no text\n", rc);
        CHECK(strcmp(text, unknown) != 0 && *text);
        for (int other = rc + 1; other <= QS_NOTFOUND; other++)
            CHECK(strcmp(text, qs_strerror(other)) != 0);
    }
}

static void success_and_errno_values(void)
{
    CHECK(strcmp(qs_strerror(QS_OK), "success") == 0);
    CHECK(strcmp(qs_strerror(ENOSPC), strerror(ENOSPC)) == 0);
    CHECK(strcmp(qs_strerror(EIO), strerror(EIO)) == 0);
}

int main(void)
{
    RUN(every_code_has_its_own_text);
    RUN(success_and_errno_values);
    return tc_summary();
}

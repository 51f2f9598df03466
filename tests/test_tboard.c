/* test_tboard.c - the TensorBoard event file writer (src/train/tboard.c):
 * CRC-32C against its published check values (RFC 3720 B.4 and the
 * "123456789" check), the masked-CRC framing against the header every
 * TensorFlow event file starts with (length 24: 18 00 .. a3 7f 4b 22), the
 * Event/Summary protobuf bytes spelled out field by field, the parsing of
 * metrics.jsonl records into tags and values (random values read back
 * exactly), and a file written with a resume's replay, read back record by
 * record with both CRCs checked. tests/test_tboard_run.sh reads a real run's
 * file with Python. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "rng.h"
#include "tboard.h"

static void test_crc32c_vectors(void **s) {
    (void)s;
    uint8_t buf[32];
    assert_int_equal(tboard_crc32c(0, "123456789", 9), 0xE3069283u);
    memset(buf, 0, sizeof buf);
    assert_int_equal(tboard_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    assert_int_equal(tboard_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    assert_int_equal(tboard_crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    assert_int_equal(tboard_crc32c(0, buf, 32), 0x113FDB5Cu);
    /* continued over pieces = at once */
    assert_int_equal(tboard_crc32c(tboard_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    assert_int_equal(tboard_crc32c(0, "", 0), 0u);
}

static void test_frame(void **s) {
    (void)s;
    uint8_t data[24], rec[40];
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < 24; i++) data[i] = (uint8_t)(rng_u32(&r) >> 24);
    assert_int_equal(tboard_frame(rec, data, 24), 40);
    static const uint8_t head[12] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    assert_memory_equal(rec, head, 12);
    assert_memory_equal(rec + 12, data, 24);
    const uint32_t c = tboard_crc32c(0, data, 24);
    const uint32_t masked = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    const uint8_t tail[4] = {(uint8_t)masked, (uint8_t)(masked >> 8), (uint8_t)(masked >> 16), (uint8_t)(masked >> 24)};
    assert_memory_equal(rec + 36, tail, 4);
    assert_int_equal(tboard_mask_crc(0), 0xa282ead8u);
}

static void test_event_bytes(void **s) {
    (void)s;
    uint8_t out[256];
    /* wall_time 1.5 (field 1, fixed64), step 300 (field 2, varint ac 02) */
    static const uint8_t head[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0xac, 0x02};
    const char *tags[2] = {"train/loss", "eval/val_top1"};
    const float values[2] = {0.25f, -2.0f};
    static const uint8_t scalars[] = {
        0x2a, 0x29, /* summary (5), 41 bytes */
        0x0a, 0x11, /* value (1), 17 bytes */
        0x0a, 0x0a, 't',  'r',  'a',  'i',  'n',  '/',  'l', 'o', 's', 's', /* tag (1) */
        0x15, 0x00, 0x00, 0x80, 0x3e, /* simple_value (2, fixed32) 0.25 */
        0x0a, 0x14, /* value, 20 bytes */
        0x0a, 0x0d, 'e',  'v',  'a',  'l',  '/',  'v',  'a', 'l', '_', 't',
        'o',  'p',  '1',  0x15, 0x00, 0x00, 0x00, 0xc0, /* -2.0 */
    };
    size_t n = tboard_event_scalars(out, sizeof out, 1.5, 300, tags, values, 2);
    assert_int_equal(n, sizeof head + sizeof scalars);
    assert_memory_equal(out, head, sizeof head);
    assert_memory_equal(out + sizeof head, scalars, sizeof scalars);
    assert_int_equal(tboard_event_scalars(out, 20, 1.5, 300, tags, values, 2), 0); /* too small */

    static const uint8_t version[] = {0x09, 0,   0,   0,   0,   0,   0,   0xf8, 0x3f, 0x10, 0x00, 0x1a, 0x0d,
                                      'b',  'r', 'a', 'i', 'n', '.', 'E', 'v',  'e',  'n',  't',  ':',  '2'};
    n = tboard_event_version(out, sizeof out, 1.5);
    assert_int_equal(n, sizeof version);
    assert_memory_equal(out, version, sizeof version);

    /* session_log (7: key 0x3a; 6 is the deprecated log_message, which
     * TensorBoard does not purge on) {status (1) = START (1)} at step 7 */
    static const uint8_t start[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x07, 0x3a, 0x02, 0x08, 0x01};
    n = tboard_event_start(out, sizeof out, 1.5, 7);
    assert_int_equal(n, sizeof start);
    assert_memory_equal(out, start, sizeof start);
}

static void test_parse_record(void **s) {
    (void)s;
    char tags[32][64];
    float v[32];
    int64_t step = -1;
    const char *train = "{\"step\": 50, \"epoch\": 0.4167, \"lr\": 1.5e-05, \"loss\": 2.301234, "
                        "\"grad_norm\": 0.75, \"img_per_s\": 1234.5, \"data_wait\": 0.0125}";
    assert_int_equal(tboard_parse_record(train, strlen(train), &step, tags, v, 32), 6);
    assert_int_equal(step, 50);
    const char *want[6] = {"train/epoch",     "train/lr",        "train/loss",
                           "train/grad_norm", "train/img_per_s", "train/data_wait"};
    const float wantv[6] = {0.4167f, 1.5e-05f, 2.301234f, 0.75f, 1234.5f, 0.0125f};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(tags[i], want[i]);
        assert_true(v[i] == wantv[i]);
    }
    const char *eval = "{\"epoch\": 1, \"step\": 8, \"val_top1\": 71.8750, \"val_top5\": 98.4375, "
                       "\"val_loss\": 0.912, \"eval_img_per_s\": 4000}";
    assert_int_equal(tboard_parse_record(eval, strlen(eval), &step, tags, v, 32), 5);
    assert_int_equal(step, 8);
    assert_string_equal(tags[0], "eval/epoch");
    assert_string_equal(tags[1], "eval/val_top1");
    assert_true(v[1] == 71.875f);
    /* start records hold no scalars; nested values are passed over */
    const char *start = "{\"event\": \"start\", \"step\": 3, \"resumed\": true, \"backends\": {\"cuda\": false}, "
                        "\"ranks\": 1, \"changes\": [{\"key\": \"a,b\\\\\", \"here\": \"}\\\"\"}]}";
    assert_int_equal(tboard_parse_record(start, strlen(start), &step, tags, v, 32), 0);
    /* not records */
    const char *bad[] = {"",
                         "{",
                         "{}",
                         "[1]",
                         "{\"loss\": 1}",
                         "{\"step\": 1.5, \"loss\": 1}",
                         "{\"step\": 1, \"loss\": }",
                         "{\"step\": 1, \"loss\": 1} x",
                         "{\"step\": 1 \"loss\": 1}",
                         "{\"step\": 1, \"a\\",
                         "{\"step\": 1, \"a\": \"x\\\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tboard_parse_record(bad[i], strlen(bad[i]), &step, tags, v, 32), -1);
    /* random values printed as metrics.c prints them (%.9g round-trips a float) come back exactly */
    Rng r;
    rng_seed(&r, 11);
    for (int k = 0; k < 200; k++) {
        float x = (float)((rng_uniform(&r) - 0.5) * pow(10.0, (double)(int)(rng_uniform(&r) * 12) - 6));
        if (x == 0.0f) x = 1e-3f;
        char line[128];
        snprintf(line, sizeof line, "{\"step\": %d, \"loss\": %.9g}", k, (double)x);
        assert_int_equal(tboard_parse_record(line, strlen(line), &step, tags, v, 32), 1);
        assert_int_equal(step, k);
        assert_true(v[0] == x);
    }
}

/* the records of an event file; each one's CRCs checked. Returns how many,
 * the data of record i in recs[i] (len lens[i]). */
static int read_records(const char *path, uint8_t recs[][512], size_t *lens, int max) {
    void *buf;
    size_t len;
    char err[256];
    assert_int_equal(read_file(path, &buf, &len, err, sizeof err), 0);
    const uint8_t *p = buf;
    size_t pos = 0;
    int n = 0;
    while (pos < len) {
        assert_true(len - pos >= 16);
        uint64_t l = 0;
        uint32_t lc = 0, dc = 0;
        for (int i = 0; i < 8; i++) l |= (uint64_t)p[pos + i] << (8 * i);
        for (int i = 0; i < 4; i++) lc |= (uint32_t)p[pos + 8 + i] << (8 * i);
        assert_int_equal(lc, tboard_mask_crc(tboard_crc32c(0, p + pos, 8)));
        assert_true(l <= 512 && len - pos - 16 >= l);
        for (int i = 0; i < 4; i++) dc |= (uint32_t)p[pos + 12 + l + i] << (8 * i);
        assert_int_equal(dc, tboard_mask_crc(tboard_crc32c(0, p + pos + 12, l)));
        assert_true(n < max);
        memcpy(recs[n], p + pos + 12, l);
        lens[n++] = l;
        pos += 16 + l;
    }
    free(buf);
    return n;
}

/* whether the n bytes at hay hold the string needle */
static int holds(const uint8_t *hay, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return 1;
    return 0;
}

/* an Event's step (field 2), or -1 */
static long event_step(const uint8_t *e, size_t n) {
    if (n < 11 || e[0] != 0x09 || e[9] != 0x10) return -1;
    long v = 0;
    for (int i = 10, shift = 0; i < (int)n; i++, shift += 7) {
        v |= (long)(e[i] & 0x7f) << shift;
        if (!(e[i] & 0x80)) return v;
    }
    return -1;
}

static void test_file_with_replay(void **s) {
    (void)s;
    char dir[] = "/tmp/test_tboard_XXXXXX", metrics[300], err[1300];
    assert_non_null(mkdtemp(dir));
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    const char *text = "{\"event\": \"start\", \"step\": 0, \"resumed\": false}\n"
                       "{\"step\": 1, \"epoch\": 0.1, \"loss\": 2.5}\n"
                       "{\"step\": 2, \"epoch\": 0.2, \"loss\": 2.25}\n"
                       "{\"epoch\": 0.2, \"step\": 2, \"val_top1\": 40.5, \"val_top5\": 90}\n";
    const void *chunks[1] = {text};
    const size_t lens1[1] = {strlen(text)};
    assert_int_equal(write_file_atomic(metrics, chunks, lens1, 1, err, sizeof err), 0);
    /* a resume from step 2: version, START at 2, the two records of step 2 again, then new ones */
    Tboard *tb = tboard_open(dir, 2, metrics, err, sizeof err);
    assert_non_null(tb);
    assert_non_null(strstr(tboard_path(tb), "/events.out.tfevents."));
    char path[1300];
    snprintf(path, sizeof path, "%s", tboard_path(tb));
    const char *rec3 = "{\"step\": 3, \"epoch\": 0.3, \"loss\": 2.125}";
    tboard_record(tb, rec3, strlen(rec3));
    tboard_record(tb, "{\"event\": \"x\", \"step\": 3}", 26); /* no scalars: nothing written */
    tboard_close(tb);
    static uint8_t recs[8][512];
    size_t lens[8];
    const int n = read_records(path, recs, lens, 8);
    assert_int_equal(n, 5);
    assert_true(holds(recs[0], lens[0], "brain.Event:2"));
    const long steps[5] = {0, 2, 2, 2, 3};
    for (int i = 0; i < 5; i++) assert_int_equal(event_step(recs[i], lens[i]), steps[i]);
    assert_memory_equal(recs[1] + lens[1] - 4, ((const uint8_t[]){0x3a, 0x02, 0x08, 0x01}), 4);
    assert_true(holds(recs[2], lens[2], "train/loss"));
    assert_true(holds(recs[3], lens[3], "eval/val_top1"));
    assert_true(holds(recs[4], lens[4], "train/loss"));
    /* TensorBoard reads a directory's event files in name order: a second
     * and a third start in the same second, and one after a file named
     * from a later clock, each get a file that sorts after all before */
    char paths[5][1300];
    snprintf(paths[0], sizeof paths[0], "%s", path);
    for (int k = 1; k < 5; k++) {
        if (k == 3) { /* not a start: a file from a clock ahead */
            snprintf(paths[3], sizeof paths[3], "%s/events.out.tfevents.9999999999.zzzz", dir);
            const int fd = open(paths[3], O_WRONLY | O_CREAT | O_EXCL, 0666);
            assert_true(fd >= 0);
            assert_int_equal(close(fd), 0);
            continue;
        }
        Tboard *again = tboard_open(dir, 3, metrics, err, sizeof err);
        assert_non_null(again);
        snprintf(paths[k], sizeof paths[k], "%s", tboard_path(again));
        tboard_close(again);
        assert_true(strcmp(paths[k], paths[k - 1]) > 0);
    }
    for (int k = 0; k < 5; k++) assert_int_equal(unlink(paths[k]), 0);
    assert_int_equal(unlink(metrics), 0);
    assert_int_equal(rmdir(dir), 0);
    /* a directory that is not there: NULL and a message naming it */
    tb = tboard_open("/nonexistent/dir", 0, "/nonexistent/dir/metrics.jsonl", err, sizeof err);
    assert_null(tb);
    assert_non_null(strstr(err, "/nonexistent/dir: cannot list the run directory"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),   cmocka_unit_test(test_frame),
        cmocka_unit_test(test_event_bytes),      cmocka_unit_test(test_parse_record),
        cmocka_unit_test(test_file_with_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

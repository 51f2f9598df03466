/* test_cli_own.c - cli_parse_own: the options one command declares for
 * itself (values as given, switches, --name=value), that they take the place
 * of a shared option of the same name, NOKEYS (no --section.key), and the
 * nearest own option named for a misspelt one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"

typedef struct {
    const char *size, *threads, *quiet;
    CliOption own[3];
} Own;

static void own_init(Own *o) {
    memset(o, 0, sizeof *o);
    o->own[0] = (CliOption){"max-side", 1, &o->size};
    o->own[1] = (CliOption){"threads", 1, &o->threads};
    o->own[2] = (CliOption){"quiet", 0, &o->quiet};
}

/* parse the words of argv with flags; 0 or -1, err filled */
static int parse(Own *o, const char *flags, char *err, Cli *cli, int argc, char **argv) {
    return cli_parse_own(cli, argc, argv, flags, o->own, 3, err, 256);
}

static void values_and_positionals(void **state) {
    (void)state;
    Own o;
    own_init(&o);
    Cli cli;
    char err[256] = "";
    char *argv[] = {"src", "--max-side=384", "--threads", "7", "out", "--quiet"};
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 6, argv), 0);
    assert_string_equal(o.size, "384");
    assert_string_equal(o.threads, "7"); /* the command's own, not train.threads */
    assert_string_equal(o.quiet, "1");
    assert_int_equal(cli.nov, 0);
    assert_int_equal(cli.npos, 2);
    assert_string_equal(cli.pos[0], "src");
    assert_string_equal(cli.pos[1], "out");
    cli_free(&cli);

    /* a second parse starts from nothing given */
    char *none[] = {"src"};
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 1, none), 0);
    assert_null(o.size);
    assert_null(o.threads);
    assert_null(o.quiet);
    cli_free(&cli);
}

static void refusals(void **state) {
    (void)state;
    Own o;
    own_init(&o);
    Cli cli;
    char err[256];
    char *typo[] = {"src", "--max-sid", "384"};
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 3, typo), -1);
    assert_string_equal(err, "unknown option --max-sid (did you mean --max-side? see --help)");
    cli_free(&cli);

    char *last[] = {"--threds"}; /* misspelt as the last word: still named as such */
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 1, last), -1);
    assert_string_equal(err, "unknown option --threds (did you mean --threads? see --help)");
    cli_free(&cli);

    char *key[] = {"--train.lr", "1"}; /* NOKEYS: a config key is no option here */
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 2, key), -1);
    assert_string_equal(err, "unknown option --train.lr (see --help)");
    cli_free(&cli);

    char *novalue[] = {"src", "--max-side"};
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 2, novalue), -1);
    assert_string_equal(err, "--max-side needs a value");
    cli_free(&cli);

    char *switchval[] = {"--quiet=1"};
    assert_int_equal(parse(&o, "ARGS NOKEYS", err, &cli, 1, switchval), -1);
    assert_string_equal(err, "--quiet takes no value");
    cli_free(&cli);

    char *stray[] = {"src"}; /* no ARGS: a positional is refused */
    assert_int_equal(parse(&o, "NOKEYS", err, &cli, 1, stray), -1);
    assert_non_null(strstr(err, "unexpected argument 'src'"));
    cli_free(&cli);
}

static void keys_without_nokeys(void **state) {
    (void)state;
    Own o;
    own_init(&o);
    Cli cli;
    char err[256];
    /* without NOKEYS the overrides still work beside the own options */
    char *argv[] = {"--train.lr", "0.5", "--max-side", "12"};
    assert_int_equal(parse(&o, "", err, &cli, 4, argv), 0);
    assert_int_equal(cli.nov, 1);
    assert_string_equal(o.size, "12");
    assert_true(cli.cfg.lr > 0.49f && cli.cfg.lr < 0.51f);
    cli_free(&cli);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_and_positionals),
        cmocka_unit_test(refusals),
        cmocka_unit_test(keys_without_nokeys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

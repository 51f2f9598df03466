/* test_cli_queues.c - cli_gpu_input_queues: CUDA_DEVICE_MAX_CONNECTIONS is
 * set to 32 for a run that may decode images on the GPU (an image-file
 * dataset, data.decode gpu or auto, --device cuda or unset), left unset for
 * every other run, and a value the environment already holds is kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"

#define VAR "CUDA_DEVICE_MAX_CONNECTIONS"

static void config_of(Config *c, const char *dataset, const char *decode) {
    char err[256];
    config_defaults(c);
    assert_int_equal(config_set(c, "data.dataset", dataset, err, sizeof err), 0);
    assert_int_equal(config_set(c, "data.decode", decode, err, sizeof err), 0);
}

static void set_for_gpu_decoding(void **state) {
    (void)state;
    const char *decodes[] = {"gpu", "auto"}, *devices[] = {"cuda", ""};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            Config c;
            config_of(&c, "imagefolder", decodes[i]);
            assert_int_equal(unsetenv(VAR), 0);
            assert_int_equal(cli_gpu_input_queues(&c, devices[j]), 1);
            assert_non_null(getenv(VAR));
            assert_string_equal(getenv(VAR), "32");
        }
}

static void unset_without_gpu_decoding(void **state) {
    (void)state;
    struct {
        const char *dataset, *decode, *device;
    } cases[] = {
        {"imagefolder", "cpu", "cuda"}, /* JPEGs, decoded on the CPU */
        {"imagefolder", "auto", "cpu"}, /* no GPU at all */
        {"fmnist", "auto", "cuda"}, /* no image files to decode */
        {"cifar10", "gpu", ""},         {"fmnist32", "auto", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        config_of(&c, cases[i].dataset, cases[i].decode);
        assert_int_equal(unsetenv(VAR), 0);
        assert_int_equal(cli_gpu_input_queues(&c, cases[i].device), 0);
        assert_null(getenv(VAR));
    }
}

static void the_users_value_is_kept(void **state) {
    (void)state;
    Config c;
    config_of(&c, "imagefolder", "gpu");
    assert_int_equal(setenv(VAR, "4", 1), 0);
    assert_int_equal(cli_gpu_input_queues(&c, "cuda"), 0);
    assert_string_equal(getenv(VAR), "4");
    assert_int_equal(unsetenv(VAR), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(set_for_gpu_decoding),
        cmocka_unit_test(unset_without_gpu_decoding),
        cmocka_unit_test(the_users_value_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

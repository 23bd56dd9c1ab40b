/* Trains and runs the exported digits model (samples/digits.dg) from C, with no Python.
 *
 *   build.py exports it (libdigits.so, digits.h) and writes the data; then
 *   ./digits DATA PARAMS STEPS
 *
 * DATA holds the training and test sets (counts, then images as floats and labels as int64);
 * PARAMS the initial weights. The program trains STEPS steps of SGD with digits_step on
 * minibatches of 32 images, then classifies the test images with digits_forward and prints the
 * loss of the last steps and the test accuracy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

enum { BATCH = 32, PIXELS = 64, CLASSES = 10 };

static void *read_or_die(FILE *f, size_t bytes, const char *what) {
    void *p = malloc(bytes);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot read %s\n", what);
        exit(2);
    }
    return p;
}

static int failed(int rc) {
    if (rc != DG_OK) fprintf(stderr, "%s\n", dg_last_error());
    return rc != DG_OK;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DATA PARAMS STEPS\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    int64_t counts[2];
    if (fread(counts, sizeof counts, 1, f) != 1) return 2;
    int64_t ntrain = counts[0], ntest = counts[1];
    float *xtrain = read_or_die(f, ntrain * PIXELS * sizeof(float), "training images");
    int64_t *ytrain = read_or_die(f, ntrain * sizeof(int64_t), "training labels");
    float *xtest = read_or_die(f, ntest * PIXELS * sizeof(float), "test images");
    int64_t *ytest = read_or_die(f, ntest * sizeof(int64_t), "test labels");
    fclose(f);

    f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 2; }
    int64_t hidden;
    if (fread(&hidden, sizeof hidden, 1, f) != 1) return 2;
    dg_array w1 = {read_or_die(f, PIXELS * hidden * sizeof(float), "w1"), 2, {PIXELS, hidden}};
    dg_array b1 = {read_or_die(f, hidden * sizeof(float), "b1"), 1, {hidden}};
    dg_array w2 = {read_or_die(f, hidden * CLASSES * sizeof(float), "w2"), 2, {hidden, CLASSES}};
    dg_array b2 = {read_or_die(f, CLASSES * sizeof(float), "b2"), 1, {CLASSES}};
    fclose(f);

    /* training: each step's new weights are written over the old ones (the caller's buffers) */
    long steps = strtol(argv[3], NULL, 10);
    float loss = 0, recent = 0;
    for (long s = 0; s < steps; s++) {
        int64_t at = (s * BATCH) % (ntrain - BATCH + 1);
        dg_array x = {xtrain + at * PIXELS, 2, {BATCH, PIXELS}};
        dg_array y = {ytrain + at, 1, {BATCH}};
        if (failed(digits_step(&w1, &b1, &w2, &b2, &x, &y, 0.2f, &loss, &w1, &b1, &w2, &b2))) return 1;
        recent += loss;
        if ((s + 1) % 100 == 0) {
            printf("step %5ld  loss %.4f\n", s + 1, recent / 100);
            recent = 0;
        }
    }

    /* classifying: the logits of every test image at once (the library allocates them) */
    dg_array x = {xtest, 2, {ntest, PIXELS}};
    dg_array logits = {0};
    if (failed(digits_forward(&x, &w1, &b1, &w2, &b2, &logits))) return 1;
    int64_t right = 0;
    for (int64_t i = 0; i < ntest; i++) {
        const float *row = (const float *)logits.data + i * CLASSES;
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (row[c] > row[best]) best = c;
        right += best == ytest[i];
    }
    printf("test accuracy %.4f (%lld images)\n", (double)right / ntest, (long long)ntest);
    dg_free(&logits);

    /* a label out of range: the located message the Python call would raise */
    ytrain[3] = 12;
    dg_array xb = {xtrain, 2, {BATCH, PIXELS}}, yb = {ytrain, 1, {BATCH}};
    if (digits_step(&w1, &b1, &w2, &b2, &xb, &yb, 0.2f, &loss, &w1, &b1, &w2, &b2) == DG_ERROR_CHECK)
        printf("a bad label is caught:\n%s\n", dg_last_error());
    return 0;
}

/* The hashing core of models.intent.features._views, in C: the same numbers as its numpy spelling.
 *
 * Why it exists: for a kiosk request the numpy spelling makes about sixty calls on arrays of a few hundred
 * to two thousand numbers, so the Python and numpy overhead of each call, not the arithmetic, is what a
 * request pays (about 0.2 ms of a 300-character message's decision). This file does the same work in one
 * call. It is optional: features.py falls back to the numpy spelling when the module is missing (no C
 * compiler at install), and the tests hold the two to the same output, number for number.
 *
 * What it computes, per view v (a padded, normalised text " norm " inside `text`, from starts[v] to
 * starts[v + 1]):
 *   - for each n-gram order n of `orders` (in that order; an order repeated counts twice): the FNV-style
 *     rolling hash of every n code points, h = cp[p] ^ seed(n), then h = h * FNV_PRIME ^ cp[p + k] for
 *     k = 1 .. n - 1, where seed(n) = ((NS_CHAR * n) mod 2^64) * FNV_PRIME mod 2^64;
 *   - the view's word hashes (given) and the hash of each pair of neighbouring words,
 *     (w[j] * FNV_PRIME) ^ w[j + 1] ^ NS_BIGRAM (never a pair across two views);
 *   - every number through the splitmix64 finaliser, then sorted, and each distinct number with how many
 *     times it occurs;
 *   - how many of the view's code points have each character-class bit of `class_table` (code points past
 *     U+FFFF read the table at U+FFFF).
 * All arithmetic is modulo 2^64 on uint64, as numpy's uint64 arrays do it.
 *
 * It declines (returns None) a text holding a lone surrogate: the numpy spelling raises
 * UnicodeEncodeError on one, and the caller then runs that spelling so the error is the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FNV_PRIME 0x100000001B3ULL
#define NS_CHAR 0x9E3779B97F4A7C15ULL
#define NS_BIGRAM 0x165667B19E3779F9ULL
#define N_CLASSES 5
#define SMALL_SORT 48

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static void insertion_sort(uint64_t *a, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        Py_ssize_t j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* Ascending sort of n mixed hashes. Mixed hashes are spread evenly over 64 bits, so one pass into 256
 * buckets by the top byte leaves a few numbers a bucket, each sorted by insertion; a bucket that is large
 * anyway (crafted text) is sorted with qsort, so no input costs quadratic time. `tmp` holds n numbers. */
static void sort_u64(uint64_t *a, Py_ssize_t n, uint64_t *tmp) {
    if (n <= SMALL_SORT) {
        insertion_sort(a, n);
        return;
    }
    Py_ssize_t count[257] = {0};
    for (Py_ssize_t i = 0; i < n; i++) count[(a[i] >> 56) + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    Py_ssize_t pos[256];
    memcpy(pos, count, sizeof pos);
    for (Py_ssize_t i = 0; i < n; i++) tmp[pos[a[i] >> 56]++] = a[i];
    for (int b = 0; b < 256; b++) {
        Py_ssize_t lo = count[b], size = count[b + 1] - count[b];
        if (size > SMALL_SORT) qsort(tmp + lo, (size_t)size, sizeof(uint64_t), cmp_u64);
        else insertion_sort(tmp + lo, size);
    }
    memcpy(a, tmp, (size_t)n * sizeof(uint64_t));
}

/* Reads a tuple or list of non-negative ints into a new C array (PyMem_Free it); NULL with an error set. */
static Py_ssize_t *read_sizes(PyObject *seq, Py_ssize_t *len, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Py_ssize_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be non-negative", what);
            Py_DECREF(fast);
            PyMem_Free(out);
            return NULL;
        }
    }
    Py_DECREF(fast);
    *len = n;
    return out;
}

PyDoc_STRVAR(views_doc,
"views(text, starts, words, word_counts, orders, class_table, out_hashes, out_counts)\n"
"    -> (bounds, classes, n) | None\n\n"
"Each view's distinct mixed hashes, ascending, written to out_hashes (uint64) with their counts in\n"
"out_counts (int64); view v's are [bounds[v], bounds[v + 1]). classes[v] counts view v's code points per\n"
"class bit; n is how many numbers were hashed in all. None for a text with a lone surrogate.");

static PyObject *views(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *text, *starts_obj, *word_counts_obj, *orders_obj;
    Py_buffer words = {0}, table = {0}, out_h = {0}, out_c = {0};
    PyObject *result = NULL;
    Py_ssize_t *starts = NULL, *word_counts = NULL, *orders = NULL;
    uint64_t *seeds = NULL, *tmp = NULL;
    Py_ssize_t n_starts, n_views, n_orders;

    if (!PyArg_ParseTuple(args, "UOy*OOy*w*w*", &text, &starts_obj, &words, &word_counts_obj, &orders_obj,
                          &table, &out_h, &out_c))
        return NULL;
    if ((starts = read_sizes(starts_obj, &n_starts, "starts")) == NULL) goto done;
    if ((word_counts = read_sizes(word_counts_obj, &n_views, "word_counts")) == NULL) goto done;
    if ((orders = read_sizes(orders_obj, &n_orders, "orders")) == NULL) goto done;
    if (n_starts != n_views + 1 || starts[0] != 0 || starts[n_views] != PyUnicode_GET_LENGTH(text)) {
        PyErr_SetString(PyExc_ValueError, "starts must run from 0 to len(text), one more than word_counts");
        goto done;
    }
    if (table.len != 0x10000) {
        PyErr_SetString(PyExc_ValueError, "class_table must hold 65536 bytes");
        goto done;
    }
    Py_ssize_t n_words = 0;
    for (Py_ssize_t v = 0; v < n_views; v++) {
        if (starts[v + 1] < starts[v]) {
            PyErr_SetString(PyExc_ValueError, "starts must not decrease");
            goto done;
        }
        n_words += word_counts[v];
    }
    if (words.len != n_words * (Py_ssize_t)sizeof(uint64_t)) {
        PyErr_SetString(PyExc_ValueError, "words must hold sum(word_counts) uint64 numbers");
        goto done;
    }
    /* How many numbers each view hashes, and their sum: the size out_hashes and out_counts need. */
    Py_ssize_t total = 0;
    for (Py_ssize_t v = 0; v < n_views; v++) {
        Py_ssize_t size = starts[v + 1] - starts[v];
        for (Py_ssize_t i = 0; i < n_orders; i++) {
            if (orders[i] < 1) {
                PyErr_SetString(PyExc_ValueError, "n-gram orders must be at least 1");
                goto done;
            }
            if (size >= orders[i]) total += size - orders[i] + 1;
        }
        if (word_counts[v]) total += 2 * word_counts[v] - 1;
    }
    if (out_h.len < total * (Py_ssize_t)sizeof(uint64_t) || out_c.len < total * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "out_hashes or out_counts is too small");
        goto done;
    }
    seeds = PyMem_Malloc((size_t)(n_orders ? n_orders : 1) * sizeof(uint64_t));
    tmp = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(uint64_t));
    if (seeds == NULL || tmp == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_orders; i++) seeds[i] = (NS_CHAR * (uint64_t)orders[i]) * FNV_PRIME;

    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const uint8_t *classes_of = table.buf;
    const uint64_t *w = words.buf;
    uint64_t *h = out_h.buf;
    int64_t *counts = out_c.buf;

    PyObject *bounds = PyList_New(n_views + 1);
    PyObject *classes = PyList_New(n_views);
    if (bounds == NULL || classes == NULL) {
        Py_XDECREF(bounds);
        Py_XDECREF(classes);
        goto done;
    }
    Py_ssize_t written = 0, w0 = 0, declined = 0;
    PyList_SET_ITEM(bounds, 0, PyLong_FromSsize_t(0));
    for (Py_ssize_t v = 0; v < n_views && !declined; v++) {
        Py_ssize_t lo = starts[v], size = starts[v + 1] - lo;
        long class_count[N_CLASSES] = {0};
        for (Py_ssize_t p = lo; p < lo + size; p++) {
            Py_UCS4 cp = PyUnicode_READ(kind, data, p);
            if (cp >= 0xD800 && cp <= 0xDFFF) {
                declined = 1;
                break;
            }
            uint8_t f = classes_of[cp > 0xFFFF ? 0xFFFF : cp];
            for (int j = 0; j < N_CLASSES; j++) class_count[j] += (f >> j) & 1;
        }
        if (declined) break;
        /* The view's numbers go to h[written ...], then are sorted and folded into distinct runs in place. */
        uint64_t *seg = h + written;
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < n_orders; i++) {
            Py_ssize_t n = orders[i];
            for (Py_ssize_t p = lo; p + n <= lo + size; p++) {
                uint64_t g = (uint64_t)PyUnicode_READ(kind, data, p) ^ seeds[i];
                for (Py_ssize_t k = 1; k < n; k++) g = g * FNV_PRIME ^ (uint64_t)PyUnicode_READ(kind, data, p + k);
                seg[m++] = mix(g);
            }
        }
        Py_ssize_t nw = word_counts[v];
        for (Py_ssize_t j = 0; j < nw; j++) seg[m++] = mix(w[w0 + j]);
        for (Py_ssize_t j = 0; j + 1 < nw; j++) seg[m++] = mix((w[w0 + j] * FNV_PRIME) ^ w[w0 + j + 1] ^ NS_BIGRAM);
        w0 += nw;
        sort_u64(seg, m, tmp);
        Py_ssize_t u = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (u > 0 && seg[u - 1] == seg[i]) {
                counts[written + u - 1]++;
            } else {
                seg[u] = seg[i];
                counts[written + u] = 1;
                u++;
            }
        }
        written += u;
        PyList_SET_ITEM(bounds, v + 1, PyLong_FromSsize_t(written));
        PyObject *row = Py_BuildValue("[lllll]", class_count[0], class_count[1], class_count[2], class_count[3],
                                      class_count[4]);
        if (row == NULL) {
            Py_DECREF(bounds);
            Py_DECREF(classes);
            goto done;
        }
        PyList_SET_ITEM(classes, v, row);
    }
    if (declined) {
        Py_DECREF(bounds);
        Py_DECREF(classes);
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("NNn", bounds, classes, total);

done:
    PyMem_Free(starts);
    PyMem_Free(word_counts);
    PyMem_Free(orders);
    PyMem_Free(seeds);
    PyMem_Free(tmp);
    PyBuffer_Release(&words);
    PyBuffer_Release(&table);
    PyBuffer_Release(&out_h);
    PyBuffer_Release(&out_c);
    return result;
}

static PyMethodDef methods[] = {
    {"views", views, METH_VARARGS, views_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastviews",
    "The hashing core of models.intent.features._views in C (optional; see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastviews(void) { return PyModule_Create(&module); }

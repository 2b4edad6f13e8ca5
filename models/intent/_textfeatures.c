/* The integer half of models.intent.features' text features, in C: the same numbers as its numpy spelling.
 *
 * Why it exists: for a kiosk request the numpy spelling makes about sixty calls on arrays of a few hundred
 * to two thousand numbers, and hashes each word it has not seen before in a Python function, so the
 * per-call overhead, not the arithmetic, is what a request pays (about 0.2 ms of a 300-character message's
 * decision). This file does the same work in one call. It is optional: features.py falls back to the numpy
 * spelling when the module is missing (no C compiler at install), and the tests hold the two to the same
 * output, number for number.
 *
 * What it computes, per view v (a padded, normalised text " norm " inside `text`, from starts[v] to
 * starts[v + 1]):
 *   - for each n-gram order n of `orders` (in that order; an order repeated counts twice): the FNV-style
 *     rolling hash of every n code points, h = cp[p] ^ seed(n), then h = h * FNV_PRIME ^ cp[p + k] for
 *     k = 1 .. n - 1, where seed(n) = ((NS_CHAR * n) mod 2^64) * FNV_PRIME mod 2^64;
 *   - each of the view's words (UTF-8) as its CRC-32 pair, crc32(word, NS_WORD mod 2^32) << 32 |
 *     crc32(word), with zlib's crc32 (the starting value is a previous CRC); and each pair of
 *     neighbouring words, (w[j] * FNV_PRIME) ^ w[j + 1] ^ NS_BIGRAM (never a pair across two views);
 *   - every number through the splitmix64 finaliser, then sorted; each distinct number h, with the count
 *     k of its copies, gives one feature: its value is log_table[k], negated when h's top bit is set, and
 *     its index is h mod dim, or, from view `remix_from` on (the final ask's part of the hash space),
 *     mix(h ^ NS_ASK) mod dim;
 *   - with `twice` (one view: a final ask that is the whole message), the view's features again, each index
 *     taken from mix(h ^ NS_ASK), as the numpy spelling copies such a view instead of computing it twice;
 *   - how many of the view's code points have each character-class bit of `class_table` (code points past
 *     U+FFFF read the table at U+FFFF).
 * All integer arithmetic is modulo 2^64 on uint64, as numpy's uint64 arrays do it. The values are copies
 * of log_table's numbers (np.log's own) and negation is exact, so they are the same bits as numpy's; the
 * floating-point normalisation that follows stays in numpy.
 *
 * It declines (returns None) where the numpy spelling must answer: a text holding a lone surrogate (numpy
 * raises UnicodeEncodeError on one, and the caller then runs it so the error is the same), and a request
 * with as many numbers as log_table has entries or more (numpy computes those logarithms).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FNV_PRIME 0x100000001B3ULL
#define NS_CHAR 0x9E3779B97F4A7C15ULL
#define NS_BIGRAM 0x165667B19E3779F9ULL
#define NS_WORD32 0x27D4EB4FUL /* NS_WORD = 0xC2B2AE3D27D4EB4F, taken mod 2^32 as the seed of the high CRC */
#define NS_ASK 0x85EBCA77C2B2AE63ULL
#define N_CLASSES 5
#define SMALL_SORT 48

/* Python 3.10 and 3.11 may still hold a str in the legacy form, which PyUnicode_READ cannot read. */
#if PY_VERSION_HEX < 0x030C0000
#define ENSURE_READY(s) (PyUnicode_READY(s) == 0)
#else
#define ENSURE_READY(s) 1
#endif

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static inline int64_t feature_index(uint64_t key, uint64_t dim, int dim_is_power_of_two) {
    return (int64_t)(dim_is_power_of_two ? key & (dim - 1) : key % dim);
}

static uint32_t crc_table[256];

static void init_crc_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320UL ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

/* zlib's crc32(value, data): the CRC-32 of data, continuing from the CRC `value`. */
static uint32_t crc32_continue(uint32_t value, const unsigned char *data, Py_ssize_t n) {
    uint32_t c = value ^ 0xFFFFFFFFUL;
    for (Py_ssize_t i = 0; i < n; i++) c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFUL;
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

PyDoc_STRVAR(text_features_doc,
"text_features(text, starts, words, word_counts, orders, class_table, log_table, remix_from, dim, twice,\n"
"              out_indices, out_values) -> (bounds, classes) | None\n\n"
"The text features of every view, in ascending hash order a view: indices (int64) to out_indices and\n"
"signed values (float64, before normalisation) to out_values; view v's are [bounds[v], bounds[v + 1]).\n"
"classes[v] counts view v's code points per class bit. None where numpy's spelling must answer.");

static PyObject *text_features(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *text, *starts_obj, *words, *word_counts_obj, *orders_obj;
    Py_buffer table = {0}, logs = {0}, out_i = {0}, out_v = {0};
    Py_ssize_t remix_from;
    int twice;
    unsigned long long dim;
    PyObject *result = NULL, *bounds = NULL, *classes = NULL;
    Py_ssize_t *starts = NULL, *word_counts = NULL, *orders = NULL;
    uint64_t *seeds = NULL, *h = NULL, *tmp = NULL, *w = NULL;
    Py_ssize_t n_starts, n_views, n_orders;

    if (!PyArg_ParseTuple(args, "UOO!OOy*y*nKpw*w*", &text, &starts_obj, &PyList_Type, &words, &word_counts_obj,
                          &orders_obj, &table, &logs, &remix_from, &dim, &twice, &out_i, &out_v))
        return NULL;
    if (!ENSURE_READY(text)) goto done;
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
    if (logs.len < (Py_ssize_t)sizeof(double) || logs.len % (Py_ssize_t)sizeof(double) != 0 || dim == 0) {
        PyErr_SetString(PyExc_ValueError, "log_table must hold float64 numbers and dim must be positive");
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
    if (PyList_GET_SIZE(words) != n_words) {
        PyErr_SetString(PyExc_ValueError, "words must hold sum(word_counts) strings");
        goto done;
    }
    /* How many numbers the views hash in all: what numpy's spelling counts, and the scratch space needed. */
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
    if (twice && n_views != 1) {
        PyErr_SetString(PyExc_ValueError, "twice needs exactly one view");
        goto done;
    }
    Py_ssize_t room = twice ? 2 * total : total;
    if (out_i.len < room * (Py_ssize_t)sizeof(int64_t) || out_v.len < room * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "out_indices or out_values is too small");
        goto done;
    }
    if (total >= logs.len / (Py_ssize_t)sizeof(double)) {  /* a count could pass the table: numpy's log */
        result = Py_NewRef(Py_None);
        goto done;
    }
    seeds = PyMem_Malloc((size_t)(n_orders ? n_orders : 1) * sizeof(uint64_t));
    h = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(uint64_t));
    tmp = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(uint64_t));
    w = PyMem_Malloc((size_t)(n_words ? n_words : 1) * sizeof(uint64_t));
    if (seeds == NULL || h == NULL || tmp == NULL || w == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_orders; i++) seeds[i] = (NS_CHAR * (uint64_t)orders[i]) * FNV_PRIME;
    for (Py_ssize_t j = 0; j < n_words; j++) {
        PyObject *word = PyList_GET_ITEM(words, j);
        Py_ssize_t len;
        const char *utf8 = PyUnicode_Check(word) ? PyUnicode_AsUTF8AndSize(word, &len) : NULL;
        if (utf8 == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "words must be strings");
            goto done;
        }
        const unsigned char *bytes = (const unsigned char *)utf8;
        w[j] = ((uint64_t)crc32_continue(NS_WORD32, bytes, len) << 32) | crc32_continue(0, bytes, len);
    }

    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const uint8_t *classes_of = table.buf;
    const double *log_table = logs.buf;
    int64_t *indices = out_i.buf;
    double *values = out_v.buf;
    int dim_is_power_of_two = (dim & (dim - 1)) == 0;

    bounds = PyList_New(n_views + 1 + twice);
    classes = PyList_New(n_views + twice);
    if (bounds == NULL || classes == NULL) goto done;
    PyList_SET_ITEM(bounds, 0, PyLong_FromSsize_t(0));
    Py_ssize_t written = 0, w0 = 0;
    for (Py_ssize_t v = 0; v < n_views; v++) {
        Py_ssize_t lo = starts[v], size = starts[v + 1] - lo;
        long class_count[N_CLASSES] = {0};
        for (Py_ssize_t p = lo; p < lo + size; p++) {
            Py_UCS4 cp = PyUnicode_READ(kind, data, p);
            if (cp >= 0xD800 && cp <= 0xDFFF) {  /* numpy's spelling raises UnicodeEncodeError */
                result = Py_NewRef(Py_None);
                goto done;
            }
            uint8_t f = classes_of[cp > 0xFFFF ? 0xFFFF : cp];
            for (int j = 0; j < N_CLASSES; j++) class_count[j] += (f >> j) & 1;
        }
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < n_orders; i++) {
            Py_ssize_t n = orders[i];
            for (Py_ssize_t p = lo; p + n <= lo + size; p++) {
                uint64_t g = (uint64_t)PyUnicode_READ(kind, data, p) ^ seeds[i];
                for (Py_ssize_t k = 1; k < n; k++) g = g * FNV_PRIME ^ (uint64_t)PyUnicode_READ(kind, data, p + k);
                h[m++] = mix(g);
            }
        }
        Py_ssize_t nw = word_counts[v];
        for (Py_ssize_t j = 0; j < nw; j++) h[m++] = mix(w[w0 + j]);
        for (Py_ssize_t j = 0; j + 1 < nw; j++) h[m++] = mix((w[w0 + j] * FNV_PRIME) ^ w[w0 + j + 1] ^ NS_BIGRAM);
        w0 += nw;
        sort_u64(h, m, tmp);
        Py_ssize_t u = 0;
        for (Py_ssize_t i = 0; i < m;) {  /* one feature a run of equal numbers; h keeps the distinct ones */
            Py_ssize_t k = i + 1;
            while (k < m && h[k] == h[i]) k++;
            uint64_t hash = h[u++] = h[i];
            indices[written] = feature_index(v >= remix_from ? mix(hash ^ NS_ASK) : hash, dim, dim_is_power_of_two);
            values[written] = (hash >> 63) ? -log_table[k - i] : log_table[k - i];
            written++;
            i = k;
        }
        PyList_SET_ITEM(bounds, v + 1, PyLong_FromSsize_t(written));
        PyObject *row = Py_BuildValue("[lllll]", class_count[0], class_count[1], class_count[2], class_count[3],
                                      class_count[4]);
        if (row == NULL) goto done;
        PyList_SET_ITEM(classes, v, row);
    }
    if (twice) {  /* the one view's distinct hashes are still in h[0 .. written) */
        Py_ssize_t u = written;
        for (Py_ssize_t j = 0; j < u; j++) {
            indices[u + j] = feature_index(mix(h[j] ^ NS_ASK), dim, dim_is_power_of_two);
            values[u + j] = values[j];
        }
        written += u;
        PyList_SET_ITEM(bounds, 2, PyLong_FromSsize_t(written));
        PyObject *row = PyList_GET_ITEM(classes, 0);
        Py_INCREF(row);
        PyList_SET_ITEM(classes, 1, row);
    }
    result = PyTuple_Pack(2, bounds, classes);

done:
    Py_XDECREF(bounds);
    Py_XDECREF(classes);
    PyMem_Free(starts);
    PyMem_Free(word_counts);
    PyMem_Free(orders);
    PyMem_Free(seeds);
    PyMem_Free(h);
    PyMem_Free(tmp);
    PyMem_Free(w);
    PyBuffer_Release(&table);
    PyBuffer_Release(&logs);
    PyBuffer_Release(&out_i);
    PyBuffer_Release(&out_v);
    return result;
}

/* ------------------------------------------------------------------------------------------------------
 * cue_scan: the English part of models.intent.cues.cue_tokens and its number count, in one pass.
 *
 * The rules it keeps (cue_tokens and _count_numbers in cues.py are the specification, and the tests hold
 * the two to each other):
 *   - words are the maximal runs of [a-z0-9+'-] (cues' _EN_WORD_RE);
 *   - a word in `words_map` adds its domains; a word whose first `shortest` characters are in
 *     `prefix_heads` adds the domain of every (prefix, domain) of `prefix_cues` it starts with;
 *   - phrases: left to right, at each word that opens phrases (`phrases_by_first`, in domain order), the
 *     first phrase whose words follow adds its domain and the scan resumes after it;
 *   - numbers: the distinct numerals, \d+([.,]\d+)? or a run of Chinese numerals followed by a unit
 *     (\d is a Unicode decimal digit, as in re), plus the distinct `number_words` that are whole words
 *     (a maximal run of \w characters: alphanumeric or '_', as re's \b and \w read them).
 * Returns (set of domain names, number count).
 */
static int is_en_word_char(Py_UCS4 c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '\'' || c == '-';
}

static int is_re_word_char(Py_UCS4 c) { return Py_UNICODE_ISALNUM(c) || c == '_'; }

static const Py_UCS4 ZH_NUMERALS[] = {0x96F6, 0x4E00, 0x4E8C, 0x4E24, 0x4E09, 0x56DB, 0x4E94, 0x516D, 0x4E03,
                                      0x516B, 0x4E5D, 0x5341, 0x767E, 0x5343, 0x4E07, 0x4EBF, 0x534A, 0};
/* 个只块元岁天年月小时分钟公里米斤克度人次本张件辆层楼号%％ */
static const Py_UCS4 ZH_UNITS[] = {0x4E2A, 0x53EA, 0x5757, 0x5143, 0x5C81, 0x5929, 0x5E74, 0x6708, 0x5C0F, 0x65F6,
                                   0x5206, 0x949F, 0x516C, 0x91CC, 0x7C73, 0x65A4, 0x514B, 0x5EA6, 0x4EBA, 0x6B21,
                                   0x672C, 0x5F20, 0x4EF6, 0x8F86, 0x5C42, 0x697C, 0x53F7, 0x25, 0xFF05, 0};

static int in_list(Py_UCS4 c, const Py_UCS4 *list) {
    for (; *list; list++)
        if (*list == c) return 1;
    return 0;
}

static int is_decimal(Py_UCS4 c) { return Py_UNICODE_ISDECIMAL(c); }  /* re's \d */

static int is_zh_numeral(Py_UCS4 c) { return in_list(c, ZH_NUMERALS); }

/* The end of the run of characters of one class that starts at i (the first index past it, at most n). */
static Py_ssize_t run_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t i, int (*in_class)(Py_UCS4)) {
    while (i < n && in_class(PyUnicode_READ(kind, data, i))) i++;
    return i;
}

/* Adds every item of the tuple `names` to the set `found`; -1 on error. */
static int add_all(PyObject *found, PyObject *names) {
    if (!PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "a cue word's domains must be a tuple");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (PySet_Add(found, PyTuple_GET_ITEM(names, i)) < 0) return -1;
    return 0;
}

/* Adds norm[lo:hi] to the set `seen`; -1 on error. */
static int add_span(PyObject *seen, PyObject *norm, Py_ssize_t lo, Py_ssize_t hi) {
    PyObject *piece = PyUnicode_Substring(norm, lo, hi);
    if (piece == NULL) return -1;
    int rc = PySet_Add(seen, piece);
    Py_DECREF(piece);
    return rc;
}

static int bad_phrases(void) {
    PyErr_SetString(PyExc_TypeError, "phrases_by_first must map a word to ((domain, words), ...)");
    return -1;
}

static int scan_words(PyObject *words, PyObject *found, PyObject *words_map, PyObject *prefix_heads,
                      Py_ssize_t shortest, PyObject *prefix_cues, PyObject *phrases_by_first) {
    Py_ssize_t n = PyList_GET_SIZE(words);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        PyObject *names = PyDict_GetItemWithError(words_map, word);
        if (names == NULL && PyErr_Occurred()) return -1;
        if (names != NULL && add_all(found, names) < 0) return -1;
        if (shortest > 0 && PyUnicode_GET_LENGTH(word) >= shortest) {
            PyObject *head = PyUnicode_Substring(word, 0, shortest);
            if (head == NULL) return -1;
            int hit = PySet_Contains(prefix_heads, head);
            Py_DECREF(head);
            if (hit < 0) return -1;
            for (Py_ssize_t k = 0; hit && k < PyTuple_GET_SIZE(prefix_cues); k++) {
                PyObject *pair = PyTuple_GET_ITEM(prefix_cues, k);
                int starts = (int)PyUnicode_Tailmatch(word, PyTuple_GET_ITEM(pair, 0), 0, PY_SSIZE_T_MAX, -1);
                if (starts < 0) return -1;
                if (starts && PySet_Add(found, PyTuple_GET_ITEM(pair, 1)) < 0) return -1;
            }
        }
    }
    for (Py_ssize_t i = 0; i + 1 < n;) {
        PyObject *options = PyDict_GetItemWithError(phrases_by_first, PyList_GET_ITEM(words, i));
        if (options == NULL && PyErr_Occurred()) return -1;
        if (options != NULL && !PyTuple_Check(options)) return bad_phrases();
        Py_ssize_t next = i + 1;
        for (Py_ssize_t k = 0; options != NULL && k < PyTuple_GET_SIZE(options); k++) {
            /* The table's shape is checked where it is read: only a phrase opener's options, per request. */
            PyObject *option = PyTuple_GET_ITEM(options, k);
            if (!PyTuple_Check(option) || PyTuple_GET_SIZE(option) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(option, 1)))
                return bad_phrases();
            PyObject *parts = PyTuple_GET_ITEM(option, 1);
            Py_ssize_t len = PyTuple_GET_SIZE(parts), j = 0;
            if (i + len > n) continue;
            for (; j < len; j++) {
                int eq = PyObject_RichCompareBool(PyList_GET_ITEM(words, i + j), PyTuple_GET_ITEM(parts, j), Py_EQ);
                if (eq < 0) return -1;
                if (!eq) break;
            }
            if (j == len) {
                if (PySet_Add(found, PyTuple_GET_ITEM(option, 0)) < 0) return -1;
                next = i + len;
                break;
            }
        }
        i = next;
    }
    return 0;
}

static Py_ssize_t count_numbers(PyObject *norm, PyObject *number_words) {
    int kind = PyUnicode_KIND(norm);
    const void *data = PyUnicode_DATA(norm);
    Py_ssize_t n = PyUnicode_GET_LENGTH(norm), count = -1;
    PyObject *numerals = PySet_New(NULL), *names = PySet_New(NULL);
    if (numerals == NULL || names == NULL) goto done;
    for (Py_ssize_t i = 0; i < n;) {  /* numerals: re's findall, left to right, no overlap */
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (is_decimal(c)) {
            Py_ssize_t k = run_end(kind, data, n, i, is_decimal);
            if (k + 1 < n) {
                Py_UCS4 sep = PyUnicode_READ(kind, data, k);
                if ((sep == '.' || sep == ',') && is_decimal(PyUnicode_READ(kind, data, k + 1)))
                    k = run_end(kind, data, n, k + 1, is_decimal);
            }
            if (add_span(numerals, norm, i, k) < 0) goto done;
            i = k;
        } else if (is_zh_numeral(c)) {
            Py_ssize_t k = run_end(kind, data, n, i, is_zh_numeral);
            /* Units are no numerals, so a shorter run is followed by a numeral: only the whole run can match,
               and where it does not, no position inside it can either. */
            if (k < n && in_list(PyUnicode_READ(kind, data, k), ZH_UNITS) && add_span(numerals, norm, i, k) < 0)
                goto done;
            i = k;
        } else {
            i++;
        }
    }
    if (PySet_GET_SIZE(number_words) > 0) {  /* whole words: maximal runs of \w */
        for (Py_ssize_t i = 0; i < n;) {
            Py_ssize_t k = run_end(kind, data, n, i, is_re_word_char);
            if (k == i) {
                i++;
                continue;
            }
            if (k - i <= 16) {
                PyObject *word = PyUnicode_Substring(norm, i, k);
                if (word == NULL) goto done;
                int hit = PySet_Contains(number_words, word);
                if (hit > 0 && PySet_Add(names, word) < 0) hit = -1;
                Py_DECREF(word);
                if (hit < 0) goto done;
            }
            i = k;
        }
    }
    count = PySet_GET_SIZE(numerals) + PySet_GET_SIZE(names);
done:
    Py_XDECREF(numerals);
    Py_XDECREF(names);
    return count;
}

PyDoc_STRVAR(cue_scan_doc,
"cue_scan(norm, words_map, prefix_heads, shortest, prefix_cues, phrases_by_first, number_words)\n"
"    -> (domains, numbers)\n\n"
"The English cue domains of a normalised text and its count of distinct numbers (see the source).");

static PyObject *cue_scan(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *norm, *words_map, *prefix_heads, *prefix_cues, *phrases_by_first, *number_words;
    Py_ssize_t shortest;
    if (!PyArg_ParseTuple(args, "UO!O!nO!O!O!", &norm, &PyDict_Type, &words_map, &PyFrozenSet_Type, &prefix_heads,
                          &shortest, &PyTuple_Type, &prefix_cues, &PyDict_Type, &phrases_by_first,
                          &PyFrozenSet_Type, &number_words))
        return NULL;
    if (!ENSURE_READY(norm)) return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(prefix_cues); k++) {
        PyObject *pair = PyTuple_GET_ITEM(prefix_cues, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_SetString(PyExc_TypeError, "prefix_cues must hold (prefix, domain) pairs");
            return NULL;
        }
    }
    int kind = PyUnicode_KIND(norm);
    const void *data = PyUnicode_DATA(norm);
    Py_ssize_t n = PyUnicode_GET_LENGTH(norm);
    PyObject *words = PyList_New(0), *found = PySet_New(NULL), *result = NULL;
    if (words == NULL || found == NULL) goto done;
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t k = run_end(kind, data, n, i, is_en_word_char);
        if (k == i) {
            i++;
            continue;
        }
        PyObject *word = PyUnicode_Substring(norm, i, k);
        if (word == NULL || PyList_Append(words, word) < 0) {
            Py_XDECREF(word);
            goto done;
        }
        Py_DECREF(word);
        i = k;
    }
    if (scan_words(words, found, words_map, prefix_heads, shortest, prefix_cues, phrases_by_first) < 0)
        goto done;
    Py_ssize_t numbers = count_numbers(norm, number_words);
    if (numbers < 0) goto done;
    result = Py_BuildValue("On", found, numbers);
done:
    Py_XDECREF(words);
    Py_XDECREF(found);
    return result;
}

static PyMethodDef methods[] = {
    {"text_features", text_features, METH_VARARGS, text_features_doc},
    {"cue_scan", cue_scan, METH_VARARGS, cue_scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_textfeatures",
    "The integer half of models.intent.features' text features in C (optional; see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__textfeatures(void) {
    init_crc_table();
    return PyModule_Create(&module);
}

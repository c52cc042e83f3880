/* A thin binding to libjpeg-turbo (Debian's libjpeg62-turbo) for training loaders: decode only
 * the region of a JPEG a crop needs, at the smallest DCT scale that still covers the output,
 * then resize it (triangle filter, antialiased like Pillow's BILINEAR) into a caller's uint8
 * HWC buffer, optionally mirrored. The GIL is released while it works.
 *
 *   header(data) -> (width, height, components, colorspace, progressive)
 *   decode(data, out, out_h, out_w, x0, y0, x1, y1, flip, max_pixels) -> None
 *
 * Errors raise DecodeError (a ValueError) with libjpeg's message; a truncated file is an error, not gray rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

static PyObject *DecodeError;

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX + 64];
} Errors;

static void on_error(j_common_ptr cinfo) {
    Errors *e = (Errors *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
}

/* Warnings are ignored but for the end of the data coming early (a cut file). */
static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        Errors *e = (Errors *)cinfo->err;
        snprintf(e->message, sizeof e->message, "the data ends early (truncated file)");
        longjmp(e->jump, 1);
    }
}

static void errors_init(struct jpeg_decompress_struct *cinfo, Errors *e) {
    cinfo->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = on_error;
    e->pub.emit_message = on_message;
    e->message[0] = 0;
}

static PyObject *header(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    struct jpeg_decompress_struct cinfo;
    Errors err;
    errors_init(&cinfo, &err);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        PyErr_SetString(DecodeError, err.message);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data.buf, (unsigned long)data.len);
    jpeg_read_header(&cinfo, TRUE);
    PyObject *result = Py_BuildValue("(IIiii)", cinfo.image_width, cinfo.image_height,
                                     cinfo.num_components, (int)cinfo.jpeg_color_space,
                                     (int)cinfo.progressive_mode);
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&data);
    return result;
}

/* One output sample's window over the input: first index, count, weights (sum 1 << BITS). */
#define BITS 14
typedef struct {
    int *first, *count, *weights, width;  /* weights: out_size * width */
} Coefficients;

static int coefficients(Coefficients *c, int in_size, double in0, double in1, int out_size) {
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale;  /* the triangle filter's support is 1 */
    int width = (int)ceil(support) * 2 + 1;
    double *w = malloc(sizeof(double) * width);
    c->first = malloc(sizeof(int) * out_size);
    c->count = malloc(sizeof(int) * out_size);
    c->weights = malloc(sizeof(int) * out_size * width);
    c->width = width;
    if (!w || !c->first || !c->count || !c->weights) {
        free(w);
        return 0;
    }
    for (int i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        if (hi - lo > width) hi = lo + width;
        if (hi <= lo) { lo = (int)center; if (lo >= in_size) lo = in_size - 1; hi = lo + 1; }
        double total = 0;
        for (int k = 0; k < hi - lo; k++) {
            double x = (k + lo - center + 0.5) / filterscale;
            double v = x < 0 ? 1.0 + x : 1.0 - x;
            w[k] = v > 0 ? v : 0;
            total += w[k];
        }
        int *iw = c->weights + i * width, sum = 0, big = 0;
        for (int k = 0; k < hi - lo; k++) {
            iw[k] = total > 0 ? (int)lround(w[k] / total * (1 << BITS)) : 0;
            sum += iw[k];
            if (iw[k] > iw[big]) big = k;
        }
        iw[big] += (1 << BITS) - sum;  /* weights sum exactly to one */
        int n = hi - lo, skip = 0;
        while (n > 1 && iw[n - 1] == 0) n--;  /* no taps of weight 0: a pixel copied is one tap */
        while (skip < n - 1 && iw[skip] == 0) skip++;
        if (skip) memmove(iw, iw + skip, sizeof(int) * (n - skip));
        c->first[i] = lo + skip;
        c->count[i] = n - skip;
    }
    free(w);
    return 1;
}

static void coefficients_free(Coefficients *c) {
    free(c->first);
    free(c->count);
    free(c->weights);
}

static inline unsigned char clip8(int v) {
    v = (v + (1 << (BITS - 1))) >> BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v;
}

/* One pass along the first axis: in (in rows x n bytes) -> out (out rows x n bytes), output row
 * y the weighted sum of input rows first[y] .. first[y] + count[y]. The inner loops run along a
 * row, so the compiler vectorizes them (AVX2 where the CPU has it). */
__attribute__((target_clones("avx2", "default")))
static void resize_axis(const unsigned char *in, size_t n, unsigned char *out, int out_rows,
                        const Coefficients *c, int *acc) {
    for (int y = 0; y < out_rows; y++) {
        const int *w = c->weights + y * c->width;
        const unsigned char *p = in + (size_t)c->first[y] * n;
        unsigned char *o = out + (size_t)y * n;
        if (c->count[y] == 1) {  /* a copy */
            memcpy(o, p, n);
            continue;
        }
        for (size_t x = 0; x < n; x++) acc[x] = 0;
        for (int k = 0; k < c->count[y]; k++, p += n) {
            int wk = w[k];
            for (size_t x = 0; x < n; x++) acc[x] += p[x] * wk;
        }
        for (size_t x = 0; x < n; x++) o[x] = clip8(acc[x]);
    }
}

/* RGB pixels (rows x cols) -> (cols x rows); each output row mirrored when flip. */
static void transpose(const unsigned char *in, int rows, int cols, unsigned char *out,
                      int flip) {
    enum { B = 32 };
    for (int r0 = 0; r0 < rows; r0 += B)
        for (int c0 = 0; c0 < cols; c0 += B)
            for (int r = r0; r < r0 + B && r < rows; r++) {
                const unsigned char *p = in + ((size_t)r * cols + c0) * 3;
                for (int c = c0; c < c0 + B && c < cols; c++, p += 3) {
                    unsigned char *q = out + ((size_t)c * rows + (flip ? rows - 1 - r : r)) * 3;
                    q[0] = p[0];
                    q[1] = p[1];
                    q[2] = p[2];
                }
            }
}

typedef struct {
    const unsigned char *data;
    size_t size;
    unsigned char *out;
    int out_h, out_w, flip;
    double x0, y0, x1, y1;
    unsigned long long max_pixels;
} Job;

/* The work, without the GIL; 0 and err->message set on failure. */
static int run(const Job *job, Errors *err) {
    struct jpeg_decompress_struct cinfo;
    unsigned char *volatile region = NULL, *volatile tmp = NULL;
    Coefficients cx = {0}, cy = {0};
    volatile int have_cx = 0, have_cy = 0;
    errors_init(&cinfo, err);
    if (setjmp(err->jump)) {
        jpeg_destroy_decompress(&cinfo);
        free(region);
        free(tmp);
        if (have_cx) coefficients_free(&cx);
        if (have_cy) coefficients_free(&cy);
        return 0;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, job->data, (unsigned long)job->size);
    jpeg_read_header(&cinfo, TRUE);
    unsigned int W = cinfo.image_width, H = cinfo.image_height;
    if ((unsigned long long)W * H > job->max_pixels) {
        snprintf(err->message, sizeof err->message,
                 "%ux%u pixels, more than the limit of %llu (a decompression bomb?)", W, H,
                 job->max_pixels);
        longjmp(err->jump, 1);
    }
    if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
        cinfo.jpeg_color_space != JCS_RGB) {
        snprintf(err->message, sizeof err->message,
                 "colour space %d (CMYK or YCCK); allowed: RGB or grayscale JPEG "
                 "(`chainermn-rt data pack` converts)", (int)cinfo.jpeg_color_space);
        longjmp(err->jump, 1);
    }
    if (!(0 <= job->x0 && job->x0 < job->x1 && job->x1 <= W && 0 <= job->y0 &&
          job->y0 < job->y1 && job->y1 <= H)) {
        snprintf(err->message, sizeof err->message,
                 "box (%.1f, %.1f, %.1f, %.1f) is not inside the %ux%u image", job->x0,
                 job->y0, job->x1, job->y1, W, H);
        longjmp(err->jump, 1);
    }
    /* The smallest power-of-two DCT scale whose crop still covers the output. */
    int denom = 8;
    while (denom > 1 && ((job->x1 - job->x0) / denom < job->out_w ||
                         (job->y1 - job->y0) / denom < job->out_h))
        denom /= 2;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int sw = cinfo.output_width, sh = cinfo.output_height;
    double sx0 = job->x0 * sw / W, sx1 = job->x1 * sw / W;
    double sy0 = job->y0 * sh / H, sy1 = job->y1 * sh / H;
    if (sx1 > sw) sx1 = sw;
    if (sy1 > sh) sy1 = sh;
    /* Rows and columns the filter reaches, beyond the box by its support. */
    double mx = (sx1 - sx0) / job->out_w, my = (sy1 - sy0) / job->out_h;
    mx = (mx < 1 ? 1 : mx) + 1;
    my = (my < 1 ? 1 : my) + 1;
    int left = (int)floor(sx0 - mx), right = (int)ceil(sx1 + mx);
    int top = (int)floor(sy0 - my), bottom = (int)ceil(sy1 + my);
    if (left < 0) left = 0;
    if (top < 0) top = 0;
    if (right > sw) right = sw;
    if (bottom > sh) bottom = sh;
    JDIMENSION xoff = left, cw = right - left;
    if (cw < (JDIMENSION)sw) jpeg_crop_scanline(&cinfo, &xoff, &cw);  /* to iMCU edges */
    else xoff = 0, cw = sw;
    int rows = bottom - top;
    region = malloc((size_t)rows * cw * 3);
    if (!region) {
        snprintf(err->message, sizeof err->message, "out of memory");
        longjmp(err->jump, 1);
    }
    if (top > 0) jpeg_skip_scanlines(&cinfo, top);
    while ((int)cinfo.output_scanline < bottom) {
        JSAMPROW row = region + (size_t)(cinfo.output_scanline - top) * cw * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    if ((int)cinfo.output_scanline < sh) jpeg_abort_decompress(&cinfo);
    else jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);

    if (!coefficients(&cx, cw, sx0 - xoff, sx1 - xoff, job->out_w)) {
        snprintf(err->message, sizeof err->message, "out of memory");
        longjmp(err->jump, 1);
    }
    have_cx = 1;
    if (!coefficients(&cy, rows, sy0 - top, sy1 - top, job->out_h)) {
        snprintf(err->message, sizeof err->message, "out of memory");
        longjmp(err->jump, 1);
    }
    have_cy = 1;
    /* Rows first (only the columns the second pass reads), then columns, each as a pass along
     * the first axis: vertical, transpose, vertical, transpose (mirroring when flip). */
    int cx0 = cx.first[0], cx1 = cx.first[job->out_w - 1] + cx.count[job->out_w - 1];
    int ncols = cx1 - cx0, out_h = job->out_h, out_w = job->out_w;
    size_t big = (size_t)out_h * (ncols > out_w ? ncols : out_w) * 3;
    tmp = malloc(big * 2 + sizeof(int) * (size_t)(ncols > out_h ? ncols : out_h) * 3);
    if (!tmp) {
        snprintf(err->message, sizeof err->message, "out of memory");
        longjmp(err->jump, 1);
    }
    unsigned char *a = tmp, *b = tmp + big;
    int *acc = (int *)(tmp + big * 2);
    /* rows of the region's columns cx0..cx1: the region is cw wide, so copy them tight */
    if (cx0 != 0 || ncols != (int)cw) {
        for (int y = 0; y < rows; y++)
            memmove(region + (size_t)y * ncols * 3, region + ((size_t)y * cw + cx0) * 3,
                    (size_t)ncols * 3);
    }
    resize_axis(region, (size_t)ncols * 3, a, out_h, &cy, acc);  /* out_h x ncols */
    transpose(a, out_h, ncols, b, 0);                            /* ncols x out_h */
    for (int x = 0; x < out_w; x++) cx.first[x] -= cx0;
    resize_axis(b, (size_t)out_h * 3, a, out_w, &cx, acc);       /* out_w x out_h */
    transpose(a, out_w, out_h, job->out, job->flip);             /* out_h x out_w */
    free(region);
    free(tmp);
    coefficients_free(&cx);
    coefficients_free(&cy);
    return 1;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    Job job;
    if (!PyArg_ParseTuple(args, "y*w*iiddddpK", &data, &out, &job.out_h, &job.out_w, &job.x0,
                          &job.y0, &job.x1, &job.y1, &job.flip, &job.max_pixels))
        return NULL;
    PyObject *result = NULL;
    if (job.out_h < 1 || job.out_w < 1 || out.len != (Py_ssize_t)job.out_h * job.out_w * 3) {
        PyErr_Format(PyExc_ValueError, "out: %zd bytes; allowed: out_h * out_w * 3 = %lld",
                     out.len, (long long)job.out_h * job.out_w * 3);
    } else {
        job.data = data.buf;
        job.size = (size_t)data.len;
        job.out = out.buf;
        Errors err;
        int ok;
        Py_BEGIN_ALLOW_THREADS
        ok = run(&job, &err);
        Py_END_ALLOW_THREADS
        if (ok) result = Py_NewRef(Py_None);
        else PyErr_SetString(DecodeError, err.message);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"header", header, METH_VARARGS,
     "header(data) -> (width, height, components, colorspace, progressive)"},
    {"decode", decode, METH_VARARGS,
     "decode(data, out, out_h, out_w, x0, y0, x1, y1, flip, max_pixels): the box of the image "
     "resized into out (out_h x out_w x 3 bytes, RGB)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpeg", NULL, -1, methods};

PyMODINIT_FUNC PyInit__jpeg(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    DecodeError = PyErr_NewException("chainermn_rt.data.jpeg.DecodeError", PyExc_ValueError, NULL);
    if (PyModule_AddObjectRef(m, "DecodeError", DecodeError) < 0) return NULL;
    PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER);
    return m;
}

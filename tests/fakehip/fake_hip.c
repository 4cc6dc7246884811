/*
 * fake_hip.c: a stand-in libamdhip64.so for tests on machines with no GPU and no ROCm.
 *
 * It exports the C symbols hip-python's wrappers resolve for everything HipDevice and
 * hip_runtime_status() call, for both hip-python generations (7.x and 10.x call the same
 * symbols, e.g. hipGetDevicePropertiesR0600). "Device" memory is host memory, so copies
 * really move bytes and a CPU emulator can read and write device pointers directly.
 *
 * Built by tests/fakehip/__init__.py with `cc -shared -fPIC -O1` into <root>/lib/libamdhip64.so;
 * hip-python 10.x finds it through ROCM_PATH=<root>, 7.x through LD_LIBRARY_PATH=<root>/lib.
 *
 * Configuration (environment, read once on the first call):
 *   FAKEHIP_ARCH             gcnArchName, default "gfx942:sramecc+:xnack-"; a comma-separated
 *                            list gives one per device ordinal (the last one repeats)
 *   FAKEHIP_CU_COUNT         multiProcessorCount, default 304; a comma-separated list as above
 *   FAKEHIP_NAME             device name, default "fakehip <arch>"
 *   FAKEHIP_DEVICE_COUNT     default 1; 0 = no GPU (hipGetDeviceCount -> hipErrorNoDevice)
 *   FAKEHIP_TOTAL_MEM        totalGlobalMem in bytes, default 64 GiB
 *   FAKEHIP_RUNTIME_VERSION  hipRuntimeGetVersion, default 70253211 (HIP 7.2.53211)
 *   FAKEHIP_DRIVER_VERSION   hipDriverGetVersion, default = the runtime version
 *   FAKEHIP_KERNELS          extra kernel names hipModuleGetFunction accepts ("*" = any name);
 *                            names in an ELF image's symbol table are always accepted
 *   FAKEHIP_FAIL             "fn=code,fn=code": these functions fail with that hipError_t
 *   FAKEHIP_ALLOC_FILL       byte hipMalloc fills new memory with, default 0xA5 (HIP does not
 *                            zero it, and neither do we, so a missing memset shows)
 *   FAKEHIP_LOG              path; every call appends one JSON line: {"fn": name, ...arguments
 *                            as the C side saw them..., "ret": hipError_t}
 *
 * Stream capture and graphs (hipStreamBeginCapture/EndCapture/IsCapturing/GetCaptureInfo,
 * hipStreamCreateWithFlags, hipGraphInstantiate/Launch/Destroy/ExecDestroy): launches on a
 * capturing stream are recorded, not run, and replayed by hipGraphLaunch through the launch hook;
 * calls a capture forbids fail with the error CLR gives and invalidate it (see the section
 * "stream capture state" for the exact rules). Modules and functions belong to the device that
 * was current when the module was loaded: using them while another device is current fails with
 * hipErrorInvalidDevice (CLR aborts). Launch records carry the current device ordinal.
 * Every call writes its record with one write(2) on an O_APPEND file, so lines from concurrent
 * threads never interleave. With FAKEHIP_LOG unset, no record is built at all, so a call costs
 * next to nothing (the per-call benchmark relies on that).
 *
 * Extension points for in-process use through ctypes (e.g. running launches on an emulator):
 *   fakehip_set_launch_hook(hook, user_data)   called by every valid hipModuleLaunchKernel that
 *                                              is not captured, and for every launch a
 *                                              hipGraphLaunch replays
 *   fakehip_allocations(ptrs, sizes, cap)      the live allocations
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int hipError_t;
typedef void *hipStream_t;

/* Values of HIP's hipError_t enum that the fake returns. */
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorInvalidConfiguration = 9,
    hipErrorInvalidDeviceFunction = 98,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidImage = 200,
    hipErrorInvalidHandle = 400,
    hipErrorIllegalState = 401,
    hipErrorNotFound = 500,
    hipErrorLaunchFailure = 719,
    hipErrorStreamCaptureUnsupported = 900,
    hipErrorStreamCaptureInvalidated = 901,
    hipErrorStreamCaptureImplicit = 906,
    hipErrorStreamCaptureWrongThread = 908,
    hipErrorUnknown = 999,
};

/* hipMemcpyKind */
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT_KIND = 4 };

/* extra[] markers, HIP_LAUNCH_PARAM_* */
#define PARAM_BUFFER_POINTER ((void *)1)
#define PARAM_BUFFER_SIZE ((void *)2)
#define PARAM_END ((void *)3)

/*
 * hipDeviceProp_tR0600: 1472 bytes. Offsets of the fields we fill, taken from HIP's
 * hip_runtime_api.h (checked with offsetof) and against hip-python's own struct by the tests,
 * which read every one of them back through both hip-python generations.
 */
#define PROP_SIZE 1472
#define OFF_NAME 0                  /* char[256] */
#define OFF_TOTAL_GLOBAL_MEM 288    /* size_t */
#define OFF_SHARED_MEM_PER_BLOCK 296 /* size_t */
#define OFF_REGS_PER_BLOCK 304      /* int */
#define OFF_WARP_SIZE 308           /* int */
#define OFF_MAX_THREADS_PER_BLOCK 320 /* int */
#define OFF_MAX_THREADS_DIM 324     /* int[3] */
#define OFF_MAX_GRID_SIZE 336       /* int[3] */
#define OFF_CLOCK_RATE 348          /* int, kHz */
#define OFF_MAJOR 360               /* int */
#define OFF_MINOR 364               /* int */
#define OFF_MULTIPROCESSOR_COUNT 388 /* int */
#define OFF_MEMORY_CLOCK_RATE 608   /* int, kHz */
#define OFF_MEMORY_BUS_WIDTH 612    /* int, bits */
#define OFF_L2_CACHE_SIZE 616       /* int */
#define OFF_MAX_THREADS_PER_MP 624  /* int */
#define OFF_SHARED_MEM_PER_MP 640   /* size_t */
#define OFF_GCN_ARCH_NAME 1160      /* char[256] */
#define OFF_MAX_SHARED_MEM_PER_MP 1416 /* size_t */

/* ---------------------------------------------------------------- configuration */

#define MAX_DEVICES 16

static struct {
    int device_count;
    char arch[MAX_DEVICES][256];
    int cu_count[MAX_DEVICES];
    char name[256];
    unsigned long long total_mem;
    int runtime_version;
    int driver_version;
    char *kernels; /* ",a,b," for substring search, or NULL */
    char *fail;    /* ",fn=code,", or NULL */
    int alloc_fill;
    int log_fd;
} cfg;

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int current_device = 0;
static __thread hipError_t last_error = hipSuccess;

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v && *v) ? v : fallback;
}

/* Split a comma-separated list into one entry per device; the last entry repeats. */
static void per_device(const char *list, char out[MAX_DEVICES][256]) {
    int n = 0;
    const char *p = list;
    while (n < MAX_DEVICES) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 255) len = 255;
        memcpy(out[n], p, len);
        out[n][len] = 0;
        n++;
        if (!end) break;
        p = end + 1;
    }
    for (int i = n; i < MAX_DEVICES; i++) memcpy(out[i], out[n - 1], 256);
}

static char *wrap_commas(const char *v) {
    if (!v || !*v) return NULL;
    size_t len = strlen(v);
    char *s = malloc(len + 3);
    s[0] = ',';
    memcpy(s + 1, v, len);
    s[len + 1] = ',';
    s[len + 2] = 0;
    return s;
}

static void load_config(void) {
    static char cus[MAX_DEVICES][256];
    cfg.device_count = atoi(env_or("FAKEHIP_DEVICE_COUNT", "1"));
    if (cfg.device_count < 0) cfg.device_count = 0;
    if (cfg.device_count > MAX_DEVICES) cfg.device_count = MAX_DEVICES;
    per_device(env_or("FAKEHIP_ARCH", "gfx942:sramecc+:xnack-"), cfg.arch);
    per_device(env_or("FAKEHIP_CU_COUNT", "304"), cus);
    for (int i = 0; i < MAX_DEVICES; i++) cfg.cu_count[i] = atoi(cus[i]);
    snprintf(cfg.name, sizeof cfg.name, "%s", env_or("FAKEHIP_NAME", ""));
    cfg.total_mem = strtoull(env_or("FAKEHIP_TOTAL_MEM", "68719476736"), NULL, 0);
    cfg.runtime_version = atoi(env_or("FAKEHIP_RUNTIME_VERSION", "70253211"));
    cfg.driver_version = atoi(env_or("FAKEHIP_DRIVER_VERSION", env_or("FAKEHIP_RUNTIME_VERSION", "70253211")));
    cfg.kernels = wrap_commas(getenv("FAKEHIP_KERNELS"));
    cfg.fail = wrap_commas(getenv("FAKEHIP_FAIL"));
    cfg.alloc_fill = (int)strtol(env_or("FAKEHIP_ALLOC_FILL", "0xA5"), NULL, 0) & 0xFF;
    const char *log = getenv("FAKEHIP_LOG");
    cfg.log_fd = (log && *log) ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
}

static void init(void) { pthread_once(&cfg_once, load_config); }

/* The failure FAKEHIP_FAIL injects for `fn`, or hipSuccess. */
static hipError_t injected(const char *fn) {
    if (!cfg.fail) return hipSuccess;
    char key[128];
    snprintf(key, sizeof key, ",%s=", fn);
    const char *hit = strstr(cfg.fail, key);
    return hit ? (hipError_t)atoi(hit + strlen(key)) : hipSuccess;
}

/* ---------------------------------------------------------------- JSON log records */

typedef struct {
    char *p;
    size_t n, cap;
    int on; /* the log is open: without it records are not built, so calls cost next to nothing */
} sb_t;

static void sb_put(sb_t *b, const char *s, size_t len) {
    if (!b->on) return;
    if (b->n + len + 1 > b->cap) {
        b->cap = (b->n + len + 1) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

static void sb_fmt(sb_t *b, const char *fmt, ...) {
    if (!b->on) return;
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)len < sizeof tmp ? (size_t)len : sizeof tmp - 1);
}

static void sb_str(sb_t *b, const char *s) {
    if (!b->on) return;
    if (!s) {
        sb_put(b, "null", 4);
        return;
    }
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            sb_fmt(b, "\\u%04x", c); /* bytes >= 0x7f logged as code points; names are ASCII */
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_hex(sb_t *b, const void *data, size_t len) {
    if (!b->on) return;
    static const char digits[] = "0123456789abcdef";
    const unsigned char *d = data;
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        char h[2] = {digits[d[i] >> 4], digits[d[i] & 15]};
        sb_put(b, h, 2);
    }
    sb_put(b, "\"", 1);
}

static void rec_begin(sb_t *b, const char *fn) {
    memset(b, 0, sizeof *b);
    b->on = cfg.log_fd >= 0;
    sb_put(b, "{\"fn\":", 6);
    sb_str(b, fn);
}

/* Finish the record, write it as one line (one write(2), so lines never interleave). */
static hipError_t rec_end(sb_t *b, hipError_t ret) {
    sb_fmt(b, ",\"ret\":%d}\n", ret);
    if (cfg.log_fd >= 0 && b->p) {
        ssize_t w = write(cfg.log_fd, b->p, b->n);
        (void)w;
    }
    free(b->p);
    if (ret != hipSuccess) last_error = ret;
    return ret;
}

#define U64(x) ((unsigned long long)(uintptr_t)(x))

/* ---------------------------------------------------------------- memory */

typedef struct {
    uintptr_t ptr;
    size_t size;
} alloc_t;

static alloc_t *allocs;
static size_t n_allocs, cap_allocs;

/* Is [p, p+n) inside one live allocation? (caller holds the lock) */
static int in_alloc(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < n_allocs; i++)
        if (a >= allocs[i].ptr && a - allocs[i].ptr <= allocs[i].size && n <= allocs[i].size - (a - allocs[i].ptr))
            return 1;
    return 0;
}

EXPORT size_t fakehip_allocations(uintptr_t *ptrs, size_t *sizes, size_t cap) {
    pthread_mutex_lock(&lock);
    size_t n = n_allocs;
    for (size_t i = 0; i < n && i < cap; i++) {
        if (ptrs) ptrs[i] = allocs[i].ptr;
        if (sizes) sizes[i] = allocs[i].size;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---------------------------------------------------------------- code objects */

typedef struct module {
    int device;
    int loaded;
    const void *image_arg; /* the pointer the caller passed */
    unsigned char *image;  /* our copy, NULL when the size is unknown */
    size_t size;           /* 0 = unknown format */
    uint64_t fnv;
    struct module *next;
} module_t;

typedef struct function {
    module_t *module;
    char *name;
    struct function *next;
} function_t;

static module_t *modules;
static function_t *functions;

static uint64_t rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int is_elf64(const unsigned char *p) {
    return memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2 && p[5] == 1;
}

/*
 * The image's size in bytes, from its headers: an ELF64 file ends at the furthest of its
 * header tables, sections and segments; a clang offload bundle at its furthest entry.
 * 0 for anything else (hipModuleLoadData gets no size, so the format must tell us).
 */
static size_t image_size(const unsigned char *p) {
    const uint64_t limit = 1ull << 32;
    if (is_elf64(p)) {
        uint64_t phoff = rd(p + 0x20, 8), shoff = rd(p + 0x28, 8);
        uint64_t ehsize = rd(p + 0x34, 2), phentsize = rd(p + 0x36, 2), phnum = rd(p + 0x38, 2);
        uint64_t shentsize = rd(p + 0x3a, 2), shnum = rd(p + 0x3c, 2);
        if (phoff > limit || shoff > limit) return 0;
        uint64_t end = ehsize;
        if (phnum && phoff + phnum * phentsize > end) end = phoff + phnum * phentsize;
        if (shnum && shoff + shnum * shentsize > end) end = shoff + shnum * shentsize;
        for (uint64_t i = 0; i < shnum; i++) {
            const unsigned char *sh = p + shoff + i * shentsize;
            uint64_t type = rd(sh + 4, 4), off = rd(sh + 0x18, 8), size = rd(sh + 0x20, 8);
            if (type != 8 /* SHT_NOBITS */ && off + size > end) end = off + size;
        }
        for (uint64_t i = 0; i < phnum; i++) {
            const unsigned char *ph = p + phoff + i * phentsize;
            uint64_t off = rd(ph + 8, 8), filesz = rd(ph + 0x20, 8);
            if (off + filesz > end) end = off + filesz;
        }
        return end > limit ? 0 : (size_t)end;
    }
    static const char bundle_magic[] = "__CLANG_OFFLOAD_BUNDLE__";
    if (memcmp(p, bundle_magic, 24) == 0) {
        uint64_t n = rd(p + 24, 8), pos = 32, end = 32;
        for (uint64_t i = 0; i < n && i < 1024; i++) {
            uint64_t off = rd(p + pos, 8), size = rd(p + pos + 8, 8), idlen = rd(p + pos + 16, 8);
            pos += 24 + idlen;
            if (off + size > end) end = off + size;
            if (pos > end) end = pos;
        }
        return end > limit ? 0 : (size_t)end;
    }
    return 0;
}

static uint64_t fnv1a64(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Does the ELF image define a kernel `name` (an STT_FUNC symbol, or the `name.kd` descriptor)? */
static int elf_has_kernel(const unsigned char *p, size_t size, const char *name) {
    if (!p || !is_elf64(p)) return 0;
    uint64_t shoff = rd(p + 0x28, 8), shentsize = rd(p + 0x3a, 2), shnum = rd(p + 0x3c, 2);
    size_t nlen = strlen(name);
    for (uint64_t i = 0; i < shnum; i++) {
        const unsigned char *sh = p + shoff + i * shentsize;
        uint64_t type = rd(sh + 4, 4);
        if (type != 2 /* SHT_SYMTAB */ && type != 11 /* SHT_DYNSYM */) continue;
        uint64_t off = rd(sh + 0x18, 8), ssize = rd(sh + 0x20, 8), link = rd(sh + 0x28, 4);
        uint64_t entsize = rd(sh + 0x38, 8);
        if (link >= shnum || entsize < 24) continue;
        const unsigned char *strsh = p + shoff + link * shentsize;
        uint64_t stroff = rd(strsh + 0x18, 8), strsize = rd(strsh + 0x20, 8);
        if (off + ssize > size || stroff + strsize > size) continue;
        for (uint64_t s = 0; s + entsize <= ssize; s += entsize) {
            const unsigned char *sym = p + off + s;
            uint64_t st_name = rd(sym, 4), st_type = sym[4] & 15;
            if (st_name >= strsize) continue;
            const char *sname = (const char *)p + stroff + st_name;
            size_t room = strsize - st_name;
            if (st_type == 2 /* STT_FUNC */ && strnlen(sname, room) == nlen && memcmp(sname, name, nlen) == 0)
                return 1;
            if (st_type == 1 /* STT_OBJECT */ && strnlen(sname, room) == nlen + 3 && memcmp(sname, name, nlen) == 0 &&
                memcmp(sname + nlen, ".kd", 3) == 0)
                return 1;
        }
    }
    return 0;
}

static int configured_kernel(const char *name) {
    if (!cfg.kernels) return 0;
    if (strcmp(cfg.kernels, ",*,") == 0) return 1;
    size_t len = strlen(name);
    char *key = malloc(len + 3);
    key[0] = ',';
    memcpy(key + 1, name, len);
    key[len + 1] = ',';
    key[len + 2] = 0;
    int hit = strstr(cfg.kernels, key) != NULL;
    free(key);
    return hit;
}

static module_t *find_module(const void *m) {
    for (module_t *it = modules; it; it = it->next)
        if (it == m) return it;
    return NULL;
}

static function_t *find_function(const void *f) {
    for (function_t *it = functions; it; it = it->next)
        if (it == f) return it;
    return NULL;
}

/* ---------------------------------------------------------------- launch hook */

/*
 * Called for every hipModuleLaunchKernel that passed validation and was not captured, after it
 * is logged and outside the fake's lock (so the hook may call back into the fake); its return
 * value is what hipModuleLaunchKernel returns. hipGraphLaunch calls it for each recorded launch,
 * in order, with the arguments copied at capture time, and stops at the first failure, which it
 * returns. `kernarg` is NULL when the caller used kernelParams.
 */
typedef int (*fakehip_launch_hook_t)(const char *kernel, const void *image, size_t image_size,
                                     unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                     unsigned block_x, unsigned block_y, unsigned block_z,
                                     unsigned shared_mem, void *stream, const void *kernarg,
                                     size_t kernarg_size, void *user_data);

static fakehip_launch_hook_t launch_hook;
static void *launch_hook_data;

EXPORT void fakehip_set_launch_hook(fakehip_launch_hook_t hook, void *user_data) {
    pthread_mutex_lock(&lock);
    launch_hook = hook;
    launch_hook_data = user_data;
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- errors */

static const struct {
    int code;
    const char *name, *text;
} error_table[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorInvalidConfiguration, "hipErrorInvalidConfiguration", "invalid configuration argument"},
    {hipErrorInvalidDeviceFunction, "hipErrorInvalidDeviceFunction", "invalid device function"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidImage, "hipErrorInvalidImage", "device kernel image is invalid"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorIllegalState, "hipErrorIllegalState", "the operation is not permitted in the current state"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
    {hipErrorStreamCaptureUnsupported, "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {hipErrorStreamCaptureInvalidated, "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {hipErrorStreamCaptureImplicit, "hipErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {hipErrorStreamCaptureWrongThread, "hipErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

static int error_index(hipError_t e) {
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == e) return (int)i;
    return -1;
}

EXPORT const char *hipGetErrorName(hipError_t e) {
    init();
    int i = error_index(e);
    sb_t b;
    rec_begin(&b, "hipGetErrorName");
    sb_fmt(&b, ",\"error\":%d", e);
    rec_end(&b, hipSuccess);
    return i >= 0 ? error_table[i].name : "hipErrorUnknown";
}

EXPORT const char *hipGetErrorString(hipError_t e) {
    init();
    int i = error_index(e);
    sb_t b;
    rec_begin(&b, "hipGetErrorString");
    sb_fmt(&b, ",\"error\":%d", e);
    rec_end(&b, hipSuccess);
    return i >= 0 ? error_table[i].text : "unknown error";
}

EXPORT hipError_t hipGetLastError(void) {
    init();
    hipError_t e = last_error;
    last_error = hipSuccess;
    sb_t b;
    rec_begin(&b, "hipGetLastError");
    sb_fmt(&b, ",\"ret\":%d}\n", e); /* logged by hand: rec_end would store e again */
    if (cfg.log_fd >= 0) {
        ssize_t w = write(cfg.log_fd, b.p, b.n);
        (void)w;
    }
    free(b.p);
    return e;
}

EXPORT hipError_t hipPeekAtLastError(void) {
    init();
    sb_t b;
    rec_begin(&b, "hipPeekAtLastError");
    hipError_t e = last_error;
    rec_end(&b, e);
    return e;
}

/* ---------------------------------------------------------------- versions and devices */

EXPORT hipError_t hipInit(unsigned int flags) {
    init();
    sb_t b;
    rec_begin(&b, "hipInit");
    sb_fmt(&b, ",\"flags\":%u", flags);
    hipError_t r = injected("hipInit");
    return rec_end(&b, r);
}

EXPORT hipError_t hipRuntimeGetVersion(int *version) {
    init();
    sb_t b;
    rec_begin(&b, "hipRuntimeGetVersion");
    hipError_t r = injected("hipRuntimeGetVersion");
    if (!r && !version) r = hipErrorInvalidValue;
    if (!r) *version = cfg.runtime_version;
    sb_fmt(&b, ",\"version\":%d", cfg.runtime_version);
    return rec_end(&b, r);
}

EXPORT hipError_t hipDriverGetVersion(int *version) {
    init();
    sb_t b;
    rec_begin(&b, "hipDriverGetVersion");
    hipError_t r = injected("hipDriverGetVersion");
    if (!r && !version) r = hipErrorInvalidValue;
    if (!r) *version = cfg.driver_version;
    sb_fmt(&b, ",\"version\":%d", cfg.driver_version);
    return rec_end(&b, r);
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
    init();
    sb_t b;
    rec_begin(&b, "hipGetDeviceCount");
    hipError_t r = injected("hipGetDeviceCount");
    if (!r && !count) r = hipErrorInvalidValue;
    if (!r) {
        *count = cfg.device_count;
        if (cfg.device_count == 0) r = hipErrorNoDevice; /* what the runtime does with no GPU */
    }
    sb_fmt(&b, ",\"count\":%d", cfg.device_count);
    return rec_end(&b, r);
}

EXPORT hipError_t hipSetDevice(int device) {
    init();
    sb_t b;
    rec_begin(&b, "hipSetDevice");
    sb_fmt(&b, ",\"device\":%d", device);
    hipError_t r = injected("hipSetDevice");
    if (!r && (device < 0 || device >= cfg.device_count))
        r = cfg.device_count ? hipErrorInvalidDevice : hipErrorNoDevice;
    if (!r) current_device = device;
    return rec_end(&b, r);
}

EXPORT hipError_t hipGetDevice(int *device) {
    init();
    sb_t b;
    rec_begin(&b, "hipGetDevice");
    hipError_t r = injected("hipGetDevice");
    if (!r && !device) r = hipErrorInvalidValue;
    if (!r && cfg.device_count == 0) r = hipErrorNoDevice;
    if (!r) *device = current_device;
    sb_fmt(&b, ",\"device\":%d", current_device);
    return rec_end(&b, r);
}

static void put_int(unsigned char *p, int off, int v) { memcpy(p + off, &v, sizeof v); }
static void put_size(unsigned char *p, int off, size_t v) { memcpy(p + off, &v, sizeof v); }

EXPORT hipError_t hipGetDevicePropertiesR0600(void *prop, int device) {
    init();
    sb_t b;
    rec_begin(&b, "hipGetDevicePropertiesR0600");
    sb_fmt(&b, ",\"device\":%d", device);
    hipError_t r = injected("hipGetDevicePropertiesR0600");
    if (!r && !prop) r = hipErrorInvalidValue;
    if (!r && (device < 0 || device >= cfg.device_count)) r = hipErrorInvalidDevice;
    if (r) return rec_end(&b, r);

    unsigned char *p = prop;
    const char *arch = cfg.arch[device];
    memset(p, 0, PROP_SIZE);
    /* "gfx942" -> major 9, minor 4; "gfx1201" -> 12, 0 */
    char digits[8] = {0};
    size_t nd = strspn(arch + 3, "0123456789abcdef");
    memcpy(digits, arch + 3, nd < 7 ? nd : 7);
    int is_gfx9 = strncmp(arch, "gfx9", 4) == 0;
    int major = nd == 3 ? digits[0] - '0' : (digits[0] - '0') * 10 + (digits[1] - '0');
    int minor = nd == 3 ? digits[1] - '0' : digits[2] - '0';
    size_t lds = strncmp(arch, "gfx950", 6) == 0 ? 160 * 1024 : 64 * 1024;

    char name[256];
    size_t archlen = strcspn(arch, ":");
    if (cfg.name[0])
        snprintf(name, sizeof name, "%s", cfg.name);
    else
        snprintf(name, sizeof name, "fakehip %.*s", (int)archlen, arch);
    memcpy(p + OFF_NAME, name, strlen(name));
    memcpy(p + OFF_GCN_ARCH_NAME, arch, strlen(arch) < 255 ? strlen(arch) : 255);
    put_size(p, OFF_TOTAL_GLOBAL_MEM, (size_t)cfg.total_mem);
    put_size(p, OFF_SHARED_MEM_PER_BLOCK, lds);
    put_int(p, OFF_REGS_PER_BLOCK, 65536);
    put_int(p, OFF_WARP_SIZE, is_gfx9 ? 64 : 32);
    put_int(p, OFF_MAX_THREADS_PER_BLOCK, 1024);
    for (int i = 0; i < 3; i++) put_int(p, OFF_MAX_THREADS_DIM + 4 * i, 1024);
    put_int(p, OFF_MAX_GRID_SIZE, 2147483647);
    put_int(p, OFF_MAX_GRID_SIZE + 4, 65536);
    put_int(p, OFF_MAX_GRID_SIZE + 8, 65536);
    put_int(p, OFF_CLOCK_RATE, 2100000);
    put_int(p, OFF_MAJOR, major);
    put_int(p, OFF_MINOR, minor);
    put_int(p, OFF_MULTIPROCESSOR_COUNT, cfg.cu_count[device]);
    put_int(p, OFF_MEMORY_CLOCK_RATE, 1300000);
    put_int(p, OFF_MEMORY_BUS_WIDTH, 8192);
    put_int(p, OFF_L2_CACHE_SIZE, 4 * 1024 * 1024);
    put_int(p, OFF_MAX_THREADS_PER_MP, 2048);
    put_size(p, OFF_SHARED_MEM_PER_MP, lds);
    put_size(p, OFF_MAX_SHARED_MEM_PER_MP, lds);
    return rec_end(&b, r);
}

/* ---------------------------------------------------------------- stream capture state */

/*
 * Stream capture, after CLR (hipamd/src/hip_graph.cpp, hip_stream.cpp, hip_internal.hpp):
 *   - A launch on a capturing stream is recorded into its graph (kernel arguments copied out of
 *     `extra`) and not run; hipGraphLaunch replays the recorded launches in order through the
 *     launch hook, with the arguments as they were at capture time.
 *   - hipMalloc, hipFree: hipErrorStreamCaptureUnsupported while a global-mode capture (any
 *     thread) or a thread-local-mode capture of the calling thread is registered; those captures
 *     are invalidated (CHECK_STREAM_CAPTURE_SUPPORTED).
 *   - hipMemcpy, hipMemset (the synchronous ones): hipErrorStreamCaptureImplicit while any capture
 *     (every mode) is registered; all of them are invalidated (CHECK_STREAM_CAPTURING).
 *   - hipDeviceSynchronize: hipErrorStreamCaptureUnsupported while any capture is registered; all
 *     are invalidated (CHECK_SUPPORTED_DURING_CAPTURE).
 *   - hipStreamSynchronize(s): the capturing stream itself, or any other stream while a global
 *     (or own thread-local) capture is registered: hipErrorStreamCaptureUnsupported, invalidating
 *     (StreamCaptureOngoing). The null stream: hipErrorStreamCaptureImplicit, invalidating all
 *     (stricter than CLR, which only waits, and the same as CUDA).
 *   - Work on the null/legacy stream (launches, async copies and memsets, graph launches) while
 *     any capture is registered: hipErrorStreamCaptureImplicit, invalidating all.
 *   - hipMemcpyAsync, hipMemsetAsync, hipGraphLaunch on the capturing stream itself: the fake
 *     refuses them with hipErrorStreamCaptureUnsupported and invalidates the capture (CLR would
 *     record a copy/memset/child-graph node; hipskinny must capture nothing but kernel launches).
 *   - Work on a stream whose capture was invalidated: hipErrorStreamCaptureInvalidated.
 *   - Async work and synchronization-free calls on other, non-capturing streams are allowed.
 *   - hipStreamEndCapture: hipErrorIllegalState when the stream is not capturing,
 *     hipErrorStreamCaptureWrongThread when a non-relaxed capture is ended from another thread,
 *     hipErrorStreamCaptureInvalidated (graph NULL, capture over) when it was invalidated.
 *   - hipStreamIsCapturing / hipStreamGetCaptureInfo on the null stream:
 *     hipErrorStreamCaptureImplicit while a blocking stream (not hipStreamNonBlocking) captures.
 * A call that invalidates captures logs their ids as "invalidated":[...].
 * Stream handles: 0 and 1 (hipStreamLegacy) are the null stream; 2 (hipStreamPerThread) is one
 * stream per thread and device; any other value is taken as a stream (created here or not).
 */
enum { CAPTURE_NONE = 0, CAPTURE_ACTIVE = 1, CAPTURE_INVALIDATED = 2 };
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };
enum { STREAM_NON_BLOCKING = 1 };

#define STREAM_LEGACY ((hipStream_t)1)
#define STREAM_PER_THREAD ((hipStream_t)2)

typedef struct {
    void *function;
    unsigned grid[3], block[3], shared;
    int device;
    unsigned char *kernarg;
    size_t kernarg_size;
} captured_t;

typedef struct graph {
    captured_t *items;
    size_t n, cap;
    int device;
} graph_t;

typedef struct graph_exec {
    graph_t *graph; /* a private copy: the graph may be destroyed after instantiation */
} graph_exec_t;

typedef struct {
    hipStream_t stream; /* resolved (never 0, 1 or 2) */
    int mode, status, device, blocking;
    pthread_t thread;
    graph_t *graph;
    unsigned long long id;
} capture_t;

#define MAX_CAPTURES 64
static capture_t captures[MAX_CAPTURES];
static int n_captures;
static unsigned long long next_capture_id = 1;

/* Streams made by hipStreamCreate*: their flags and device. */
typedef struct {
    uintptr_t handle;
    unsigned flags;
    int device;
} stream_rec_t;

static stream_rec_t *streams;
static size_t n_streams, cap_streams;
static uintptr_t next_stream = 0x5000;
static __thread uintptr_t per_thread_stream[MAX_DEVICES];

/* Live graphs and executable graphs, so stale handles fail instead of crashing the process. */
static void **live_graphs, **live_execs;
static size_t n_graphs, cap_graphs, n_execs, cap_execs;

static void ptr_add(void ***set, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        *cap = *cap * 2 + 16;
        *set = realloc(*set, *cap * sizeof **set);
    }
    (*set)[(*n)++] = p;
}

static int ptr_remove(void **set, size_t *n, const void *p) {
    for (size_t i = 0; i < *n; i++)
        if (set[i] == p) {
            set[i] = set[--*n];
            return 1;
        }
    return 0;
}

static int ptr_has(void **set, size_t n, const void *p) {
    for (size_t i = 0; i < n; i++)
        if (set[i] == p) return 1;
    return 0;
}

static void free_graph(graph_t *g) {
    if (!g) return;
    for (size_t k = 0; k < g->n; k++) free(g->items[k].kernarg);
    free(g->items);
    free(g);
}

static int is_null_stream(hipStream_t s) { return s == NULL || s == STREAM_LEGACY; }

/* The stream a handle names: hipStreamPerThread becomes this thread's stream on the current
   device (caller holds the lock). */
static hipStream_t resolve_stream(hipStream_t s) {
    if (s != STREAM_PER_THREAD) return s;
    int d = current_device >= 0 && current_device < MAX_DEVICES ? current_device : 0;
    if (!per_thread_stream[d]) {
        per_thread_stream[d] = next_stream;
        next_stream += 0x10;
    }
    return (hipStream_t)per_thread_stream[d];
}

static stream_rec_t *find_stream(hipStream_t s) {
    for (size_t i = 0; i < n_streams; i++)
        if (streams[i].handle == (uintptr_t)s) return &streams[i];
    return NULL;
}

/* Index of the capture on (resolved) `stream`, or -1 (caller holds the lock). */
static int capture_of(hipStream_t stream) {
    for (int i = 0; i < n_captures; i++)
        if (captures[i].stream == stream) return i;
    return -1;
}

static int own_capture(const capture_t *c) { return pthread_equal(c->thread, pthread_self()); }

/* Invalidate capture i, noting its id in the record (caller holds the lock). */
static void invalidate(sb_t *b, int i, int *noted) {
    captures[i].status = CAPTURE_INVALIDATED;
    sb_fmt(b, "%s%llu", *noted ? "," : ",\"invalidated\":[", captures[i].id);
    *noted = 1;
}

static void close_noted(sb_t *b, int noted) {
    if (noted) sb_put(b, "]", 1);
}

/* hipMalloc, hipFree, synchronizing a non-capturing stream: a global capture of any thread or a
   non-relaxed capture of this thread forbids them (caller holds the lock). */
static hipError_t forbid_unsafe(sb_t *b) {
    int noted = 0;
    for (int i = 0; i < n_captures; i++)
        if (captures[i].mode == MODE_GLOBAL || (captures[i].mode == MODE_THREAD_LOCAL && own_capture(&captures[i])))
            invalidate(b, i, &noted);
    close_noted(b, noted);
    return noted ? hipErrorStreamCaptureUnsupported : hipSuccess;
}

/* Any capture at all forbids the call; `err` is what it fails with (caller holds the lock). */
static hipError_t forbid_any(sb_t *b, hipError_t err) {
    int noted = 0;
    for (int i = 0; i < n_captures; i++) invalidate(b, i, &noted);
    close_noted(b, noted);
    return noted ? err : hipSuccess;
}

/* Work other than a kernel launch on `stream` (async copy or memset, graph launch), or `sync`:
   synchronizing it (caller holds the lock). */
static hipError_t check_stream_work(sb_t *b, hipStream_t stream, int sync) {
    if (is_null_stream(stream)) return forbid_any(b, hipErrorStreamCaptureImplicit);
    int i = capture_of(resolve_stream(stream));
    if (i >= 0) {
        if (!sync && captures[i].status == CAPTURE_INVALIDATED) return hipErrorStreamCaptureInvalidated;
        int noted = 0;
        invalidate(b, i, &noted);
        close_noted(b, noted);
        return hipErrorStreamCaptureUnsupported;
    }
    return sync ? forbid_unsafe(b) : hipSuccess;
}

/* Locking wrappers for the memory API. */
static hipError_t locked_unsafe(sb_t *b) {
    pthread_mutex_lock(&lock);
    hipError_t r = forbid_unsafe(b);
    pthread_mutex_unlock(&lock);
    return r;
}

static hipError_t locked_any(sb_t *b, hipError_t err) {
    pthread_mutex_lock(&lock);
    hipError_t r = forbid_any(b, err);
    pthread_mutex_unlock(&lock);
    return r;
}

static hipError_t locked_stream_work(sb_t *b, hipStream_t stream, int sync) {
    pthread_mutex_lock(&lock);
    hipError_t r = check_stream_work(b, stream, sync);
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---------------------------------------------------------------- memory API */

EXPORT hipError_t hipMalloc(void **ptr, size_t size) {
    init();
    sb_t b;
    rec_begin(&b, "hipMalloc");
    sb_fmt(&b, ",\"size\":%zu", size);
    hipError_t r = injected("hipMalloc");
    if (!r && !ptr) r = hipErrorInvalidValue;
    if (!r) r = locked_unsafe(&b);
    if (!r && cfg.device_count == 0) r = hipErrorNoDevice;
    void *mem = NULL;
    if (!r && size) {
        size_t rounded = (size + 255) & ~(size_t)255;
        mem = rounded >= size ? aligned_alloc(256, rounded) : NULL;
        if (!mem) {
            r = hipErrorOutOfMemory;
        } else {
            memset(mem, cfg.alloc_fill, rounded);
            pthread_mutex_lock(&lock);
            if (n_allocs == cap_allocs) {
                cap_allocs = cap_allocs * 2 + 16;
                allocs = realloc(allocs, cap_allocs * sizeof *allocs);
            }
            allocs[n_allocs++] = (alloc_t){(uintptr_t)mem, size};
            pthread_mutex_unlock(&lock);
        }
    }
    if (ptr && r != hipErrorInvalidValue) *ptr = mem;
    sb_fmt(&b, ",\"ptr\":%llu", U64(mem));
    return rec_end(&b, r);
}

EXPORT hipError_t hipFree(void *ptr) {
    init();
    sb_t b;
    rec_begin(&b, "hipFree");
    sb_fmt(&b, ",\"ptr\":%llu", U64(ptr));
    hipError_t r = injected("hipFree");
    if (!r) r = locked_unsafe(&b);
    if (!r && ptr) {
        pthread_mutex_lock(&lock);
        size_t i = 0;
        while (i < n_allocs && allocs[i].ptr != (uintptr_t)ptr) i++;
        if (i == n_allocs) {
            r = hipErrorInvalidValue;
        } else {
            allocs[i] = allocs[--n_allocs];
            free(ptr);
        }
        pthread_mutex_unlock(&lock);
    }
    return rec_end(&b, r);
}

static hipError_t do_memcpy(const char *fn, void *dst, const void *src, size_t n, int kind, void *stream,
                            int async) {
    init();
    sb_t b;
    rec_begin(&b, fn);
    sb_fmt(&b, ",\"dst\":%llu,\"src\":%llu,\"size\":%zu,\"kind\":%d", U64(dst), U64(src), n, kind);
    if (async) sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected(fn);
    if (!r) r = async ? locked_stream_work(&b, stream, 0) : locked_any(&b, hipErrorStreamCaptureImplicit);
    if (!r && (kind < H2H || kind > DEFAULT_KIND)) r = hipErrorInvalidValue;
    if (!r && n && (!dst || !src)) r = hipErrorInvalidValue;
    if (!r && n) {
        /* Device sides must lie inside one allocation, as a real runtime would fault otherwise. */
        pthread_mutex_lock(&lock);
        if ((kind == H2D || kind == D2D) && !in_alloc(dst, n)) r = hipErrorInvalidValue;
        if ((kind == D2H || kind == D2D) && !in_alloc(src, n)) r = hipErrorInvalidValue;
        pthread_mutex_unlock(&lock);
    }
    if (!r && n) memmove(dst, src, n);
    return rec_end(&b, r);
}

EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
    return do_memcpy("hipMemcpy", dst, src, n, kind, NULL, 0);
}

EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, hipStream_t stream) {
    return do_memcpy("hipMemcpyAsync", dst, src, n, kind, stream, 1);
}

static hipError_t do_memset(const char *fn, void *dst, int value, size_t n, void *stream, int async) {
    init();
    sb_t b;
    rec_begin(&b, fn);
    sb_fmt(&b, ",\"dst\":%llu,\"value\":%d,\"size\":%zu", U64(dst), value, n);
    if (async) sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected(fn);
    if (!r) r = async ? locked_stream_work(&b, stream, 0) : locked_any(&b, hipErrorStreamCaptureImplicit);
    if (!r && n) {
        pthread_mutex_lock(&lock);
        if (!in_alloc(dst, n)) r = hipErrorInvalidValue;
        pthread_mutex_unlock(&lock);
    }
    if (!r && n) memset(dst, value & 0xFF, n);
    return rec_end(&b, r);
}

EXPORT hipError_t hipMemset(void *dst, int value, size_t n) { return do_memset("hipMemset", dst, value, n, NULL, 0); }

EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t n, hipStream_t stream) {
    return do_memset("hipMemsetAsync", dst, value, n, stream, 1);
}

/* ---------------------------------------------------------------- streams */

static hipError_t create_stream(const char *fn, hipStream_t *stream, unsigned flags) {
    init();
    sb_t b;
    rec_begin(&b, fn);
    hipError_t r = injected(fn);
    if (!r && !stream) r = hipErrorInvalidValue;
    if (!r && flags != 0 && flags != STREAM_NON_BLOCKING) r = hipErrorInvalidValue;
    uintptr_t s = 0;
    if (!r) {
        pthread_mutex_lock(&lock);
        s = next_stream;
        next_stream += 0x10;
        if (n_streams == cap_streams) {
            cap_streams = cap_streams * 2 + 16;
            streams = realloc(streams, cap_streams * sizeof *streams);
        }
        streams[n_streams++] = (stream_rec_t){s, flags, current_device};
        pthread_mutex_unlock(&lock);
        *stream = (hipStream_t)s;
    }
    sb_fmt(&b, ",\"stream\":%llu,\"flags\":%u,\"device\":%d", U64(s), flags, current_device);
    return rec_end(&b, r);
}

EXPORT hipError_t hipStreamCreate(hipStream_t *stream) { return create_stream("hipStreamCreate", stream, 0); }

EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
    return create_stream("hipStreamCreateWithFlags", stream, flags);
}

EXPORT hipError_t hipStreamDestroy(hipStream_t stream) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamDestroy");
    sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected("hipStreamDestroy");
    if (!r && (is_null_stream(stream) || stream == STREAM_PER_THREAD)) r = hipErrorInvalidHandle;
    if (!r) {
        pthread_mutex_lock(&lock);
        stream_rec_t *rec = find_stream(stream);
        if (rec) *rec = streams[--n_streams];
        int i = capture_of(stream);
        if (i >= 0) {
            /* The capture ends with the stream; its graph is never handed out. */
            sb_fmt(&b, ",\"capture_dropped\":%llu", captures[i].id);
            free_graph(captures[i].graph);
            captures[i] = captures[--n_captures];
        }
        pthread_mutex_unlock(&lock);
    }
    return rec_end(&b, r);
}

EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamSynchronize");
    sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected("hipStreamSynchronize");
    if (!r) r = locked_stream_work(&b, stream, 1);
    return rec_end(&b, r);
}

EXPORT hipError_t hipDeviceSynchronize(void) {
    init();
    sb_t b;
    rec_begin(&b, "hipDeviceSynchronize");
    hipError_t r = injected("hipDeviceSynchronize");
    if (!r) r = locked_any(&b, hipErrorStreamCaptureUnsupported);
    return rec_end(&b, r);
}

/* ---------------------------------------------------------------- stream capture and graphs */

EXPORT hipError_t hipStreamBeginCapture(hipStream_t stream, int mode) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamBeginCapture");
    sb_fmt(&b, ",\"stream\":%llu,\"mode\":%d,\"device\":%d", U64(stream), mode, current_device);
    hipError_t r = injected("hipStreamBeginCapture");
    unsigned long long id = 0;
    pthread_mutex_lock(&lock);
    if (!r && is_null_stream(stream)) r = hipErrorStreamCaptureUnsupported; /* never on the null stream */
    if (!r && (mode < MODE_GLOBAL || mode > MODE_RELAXED)) r = hipErrorInvalidValue;
    hipStream_t s = r ? NULL : resolve_stream(stream);
    if (!r && capture_of(s) >= 0) r = hipErrorIllegalState;
    if (!r && n_captures == MAX_CAPTURES) r = hipErrorOutOfMemory;
    if (!r) {
        stream_rec_t *rec = find_stream(s);
        capture_t *c = &captures[n_captures++];
        memset(c, 0, sizeof *c);
        c->stream = s;
        c->mode = mode;
        c->status = CAPTURE_ACTIVE;
        c->device = rec ? rec->device : current_device;
        c->blocking = !(rec && (rec->flags & STREAM_NON_BLOCKING));
        c->thread = pthread_self();
        c->graph = calloc(1, sizeof *c->graph);
        c->graph->device = c->device;
        c->id = id = next_capture_id++;
    }
    pthread_mutex_unlock(&lock);
    sb_fmt(&b, ",\"id\":%llu", id);
    return rec_end(&b, r);
}

EXPORT hipError_t hipStreamEndCapture(hipStream_t stream, void **graph) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamEndCapture");
    sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected("hipStreamEndCapture");
    graph_t *g = NULL;
    size_t launches = 0;
    unsigned long long id = 0;
    pthread_mutex_lock(&lock);
    if (!r && !graph) r = hipErrorInvalidValue;
    int i = r || is_null_stream(stream) ? -1 : capture_of(resolve_stream(stream));
    if (!r && i < 0) r = hipErrorIllegalState;
    if (!r && captures[i].mode != MODE_RELAXED && !own_capture(&captures[i])) r = hipErrorStreamCaptureWrongThread;
    if (!r) {
        id = captures[i].id;
        g = captures[i].graph;
        launches = g->n;
        if (captures[i].status == CAPTURE_INVALIDATED) {
            r = hipErrorStreamCaptureInvalidated;
            free_graph(g);
            g = NULL;
        } else {
            ptr_add(&live_graphs, &n_graphs, &cap_graphs, g);
        }
        captures[i] = captures[--n_captures];
    }
    pthread_mutex_unlock(&lock);
    if (graph && r != hipErrorInvalidValue && r != hipErrorStreamCaptureWrongThread) *graph = g;
    sb_fmt(&b, ",\"id\":%llu,\"graph\":%llu,\"launches\":%zu", id, U64(g), launches);
    return rec_end(&b, r);
}

/* Status (and id) of the capture on `stream`, for hipStreamIsCapturing / GetCaptureInfo. */
static hipError_t capture_status(hipStream_t stream, int *st, unsigned long long *id) {
    hipError_t r = hipSuccess;
    *st = CAPTURE_NONE;
    *id = 0;
    pthread_mutex_lock(&lock);
    if (is_null_stream(stream)) {
        for (int i = 0; i < n_captures; i++)
            if (captures[i].blocking) r = hipErrorStreamCaptureImplicit;
    } else {
        int i = capture_of(resolve_stream(stream));
        if (i >= 0) {
            *st = captures[i].status;
            *id = captures[i].id;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT hipError_t hipStreamIsCapturing(hipStream_t stream, int *status) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamIsCapturing");
    sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected("hipStreamIsCapturing");
    int st = CAPTURE_NONE;
    unsigned long long id = 0;
    if (status) *status = CAPTURE_NONE; /* also on failure: hip-python converts it to its enum regardless */
    if (!r && !status) r = hipErrorInvalidValue;
    if (!r) r = capture_status(stream, &st, &id);
    if (!r) *status = st;
    sb_fmt(&b, ",\"status\":%d,\"id\":%llu", st, id);
    return rec_end(&b, r);
}

EXPORT hipError_t hipStreamGetCaptureInfo(hipStream_t stream, int *status, unsigned long long *id) {
    init();
    sb_t b;
    rec_begin(&b, "hipStreamGetCaptureInfo");
    sb_fmt(&b, ",\"stream\":%llu", U64(stream));
    hipError_t r = injected("hipStreamGetCaptureInfo");
    int st = CAPTURE_NONE;
    unsigned long long cid = 0;
    if (status) *status = CAPTURE_NONE;
    if (id) *id = 0;
    if (!r && !status) r = hipErrorInvalidValue;
    if (!r) r = capture_status(stream, &st, &cid);
    if (!r) {
        *status = st;
        if (id) *id = cid;
    }
    sb_fmt(&b, ",\"status\":%d,\"id\":%llu", st, cid);
    return rec_end(&b, r);
}

EXPORT hipError_t hipGraphInstantiate(void **exec, void *graph, void **error_node, char *log_buffer,
                                      size_t buffer_size) {
    init();
    sb_t b;
    rec_begin(&b, "hipGraphInstantiate");
    sb_fmt(&b, ",\"graph\":%llu", U64(graph));
    if (error_node) *error_node = NULL;
    if (log_buffer && buffer_size) log_buffer[0] = 0;
    hipError_t r = injected("hipGraphInstantiate");
    if (!r && (!exec || !graph)) r = hipErrorInvalidValue;
    graph_exec_t *e = NULL;
    size_t launches = 0;
    pthread_mutex_lock(&lock);
    if (!r && !ptr_has(live_graphs, n_graphs, graph)) r = hipErrorInvalidValue;
    if (!r) {
        const graph_t *g = graph;
        launches = g->n;
        e = calloc(1, sizeof *e);
        e->graph = calloc(1, sizeof *e->graph);
        e->graph->device = g->device;
        e->graph->n = e->graph->cap = g->n;
        e->graph->items = calloc(g->n ? g->n : 1, sizeof *g->items);
        for (size_t k = 0; k < g->n; k++) {
            const captured_t *src = &g->items[k];
            captured_t *dst = &e->graph->items[k];
            *dst = *src;
            dst->kernarg = src->kernarg ? malloc(src->kernarg_size ? src->kernarg_size : 1) : NULL;
            if (src->kernarg && src->kernarg_size) memcpy(dst->kernarg, src->kernarg, src->kernarg_size);
        }
        ptr_add(&live_execs, &n_execs, &cap_execs, e);
        *exec = e;
    }
    pthread_mutex_unlock(&lock);
    sb_fmt(&b, ",\"exec\":%llu,\"launches\":%zu", U64(e), launches);
    return rec_end(&b, r);
}

EXPORT hipError_t hipGraphDestroy(void *graph) {
    init();
    sb_t b;
    rec_begin(&b, "hipGraphDestroy");
    sb_fmt(&b, ",\"graph\":%llu", U64(graph));
    hipError_t r = injected("hipGraphDestroy");
    if (!r && !graph) r = hipErrorInvalidValue;
    pthread_mutex_lock(&lock);
    if (!r && !ptr_remove(live_graphs, &n_graphs, graph)) r = hipErrorIllegalState; /* CLR: already destroyed */
    pthread_mutex_unlock(&lock);
    if (!r) free_graph(graph);
    return rec_end(&b, r);
}

EXPORT hipError_t hipGraphExecDestroy(void *exec) {
    init();
    sb_t b;
    rec_begin(&b, "hipGraphExecDestroy");
    sb_fmt(&b, ",\"exec\":%llu", U64(exec));
    hipError_t r = injected("hipGraphExecDestroy");
    if (!r && !exec) r = hipErrorInvalidValue;
    pthread_mutex_lock(&lock);
    if (!r && !ptr_remove(live_execs, &n_execs, exec)) r = hipErrorInvalidValue;
    pthread_mutex_unlock(&lock);
    if (!r) {
        free_graph(((graph_exec_t *)exec)->graph);
        free(exec);
    }
    return rec_end(&b, r);
}

/* Record a launch into capture i (caller holds the lock). */
static void capture_launch(int i, void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shared, const void *kernarg, size_t kernarg_size) {
    graph_t *g = captures[i].graph;
    if (g->n == g->cap) {
        g->cap = g->cap * 2 + 8;
        g->items = realloc(g->items, g->cap * sizeof *g->items);
    }
    captured_t *c = &g->items[g->n++];
    /* kernarg is NULL for a kernelParams launch: the fake cannot size those arguments */
    *c = (captured_t){function, {gx, gy, gz}, {bx, by, bz}, shared, current_device,
                      kernarg ? malloc(kernarg_size ? kernarg_size : 1) : NULL, kernarg_size};
    if (kernarg && kernarg_size) memcpy(c->kernarg, kernarg, kernarg_size);
}

/* ---------------------------------------------------------------- modules and launches */

EXPORT hipError_t hipModuleLoadData(void **module, const void *image) {
    init();
    sb_t b;
    rec_begin(&b, "hipModuleLoadData");
    hipError_t r = injected("hipModuleLoadData");
    if (!r && (!module || !image)) r = hipErrorInvalidValue;
    if (!r && (current_device < 0 || current_device >= cfg.device_count)) r = hipErrorNoDevice;
    module_t *m = NULL;
    if (!r) {
        m = calloc(1, sizeof *m);
        m->device = current_device;
        m->loaded = 1;
        m->image_arg = image;
        m->size = image_size(image);
        if (m->size) {
            /* Copy it: the runtime must not depend on the caller's buffer after loading. */
            m->image = malloc(m->size);
            memcpy(m->image, image, m->size);
            m->fnv = fnv1a64(m->image, m->size);
        }
        pthread_mutex_lock(&lock);
        m->next = modules;
        modules = m;
        pthread_mutex_unlock(&lock);
        *module = m;
    }
    sb_fmt(&b, ",\"device\":%d,\"image\":%llu,\"module\":%llu", current_device, U64(image), U64(m));
    if (m && m->size)
        sb_fmt(&b, ",\"size\":%zu,\"fnv1a64\":\"%016llx\"", m->size, (unsigned long long)m->fnv);
    else
        sb_fmt(&b, ",\"size\":null,\"fnv1a64\":null");
    return rec_end(&b, r);
}

EXPORT hipError_t hipModuleUnload(void *module) {
    init();
    sb_t b;
    rec_begin(&b, "hipModuleUnload");
    sb_fmt(&b, ",\"module\":%llu", U64(module));
    hipError_t r = injected("hipModuleUnload");
    pthread_mutex_lock(&lock);
    module_t *m = find_module(module);
    if (!r && (!m || !m->loaded)) r = hipErrorInvalidHandle;
    if (!r) m->loaded = 0; /* records stay, so stale handles are recognised */
    pthread_mutex_unlock(&lock);
    return rec_end(&b, r);
}

EXPORT hipError_t hipModuleGetFunction(void **function, void *module, const char *kname) {
    init();
    sb_t b;
    rec_begin(&b, "hipModuleGetFunction");
    sb_fmt(&b, ",\"module\":%llu,\"name\":", U64(module));
    sb_str(&b, kname);
    hipError_t r = injected("hipModuleGetFunction");
    if (!r && (!function || !kname)) r = hipErrorInvalidValue;
    function_t *f = NULL;
    pthread_mutex_lock(&lock);
    module_t *m = r ? NULL : find_module(module);
    if (!r && (!m || !m->loaded)) r = hipErrorInvalidHandle;
    /* CLR's DynCO::getDynFunc aborts the process here; an error code is kinder to tests. */
    if (!r && m->device != current_device) r = hipErrorInvalidDevice;
    if (!r && !elf_has_kernel(m->image, m->size, kname) && !configured_kernel(kname)) r = hipErrorNotFound;
    if (!r) {
        for (function_t *it = functions; it && !f; it = it->next)
            if (it->module == m && strcmp(it->name, kname) == 0) f = it;
        if (!f) {
            f = calloc(1, sizeof *f);
            f->module = m;
            f->name = strdup(kname);
            f->next = functions;
            functions = f;
        }
        *function = f;
    }
    pthread_mutex_unlock(&lock);
    sb_fmt(&b, ",\"function\":%llu", U64(f));
    return rec_end(&b, r);
}

EXPORT hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, hipStream_t stream, void **kernelParams,
                                        void **extra) {
    init();
    sb_t b;
    rec_begin(&b, "hipModuleLaunchKernel");
    sb_fmt(&b, ",\"function\":%llu,\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shared_mem\":%u,\"stream\":%llu",
           U64(f), gx, gy, gz, bx, by, bz, shared, U64(stream));
    sb_fmt(&b, ",\"kernel_params_null\":%s,\"extra_null\":%s,\"device\":%d", kernelParams ? "false" : "true",
           extra ? "false" : "true", current_device);
    hipError_t r = injected("hipModuleLaunchKernel");

    /* Decode extra = {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}, in any order, as CLR does. */
    const void *kernarg = NULL;
    size_t kernarg_size = 0;
    int have_buf = 0, have_size = 0;
    if (extra) {
        for (int i = 0; i < 16 && extra[i] != PARAM_END; i += 2) {
            if (extra[i] == PARAM_BUFFER_POINTER) {
                kernarg = extra[i + 1];
                have_buf = 1;
            } else if (extra[i] == PARAM_BUFFER_SIZE && extra[i + 1]) {
                kernarg_size = *(const size_t *)extra[i + 1];
                have_size = 1;
            } else {
                if (!r) r = hipErrorInvalidValue; /* unknown marker: a malformed config */
                break;
            }
        }
        if (!r && (!have_buf || !have_size || (kernarg_size && !kernarg))) r = hipErrorInvalidValue;
    }
    if (have_buf && have_size && kernarg) {
        sb_put(&b, ",\"kernarg\":", 11);
        sb_hex(&b, kernarg, kernarg_size);
        sb_fmt(&b, ",\"kernarg_size\":%zu", kernarg_size);
    } else {
        sb_fmt(&b, ",\"kernarg\":null,\"kernarg_size\":%s", have_size ? "0" : "null");
        if (!have_buf) kernarg = NULL;
    }

    pthread_mutex_lock(&lock);
    function_t *fn = find_function(f);
    if (!r && (!fn || !fn->module->loaded)) r = hipErrorInvalidHandle;
    if (!r && kernelParams && extra) r = hipErrorInvalidValue;
    /* CLR aborts when the function's module was loaded for another device; an error code is kinder. */
    if (!r && fn->module->device != current_device) r = hipErrorInvalidDevice;
    if (!r && (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)) r = hipErrorInvalidConfiguration;
    if (!r && (gx > 2147483647u || gy > 65536 || gz > 65536)) r = hipErrorInvalidValue;
    if (!r && (unsigned long long)bx * by * bz > 1024) r = hipErrorInvalidConfiguration;
    int captured = 0;
    unsigned long long capture_id = 0;
    if (!r) {
        if (is_null_stream(stream)) {
            r = forbid_any(&b, hipErrorStreamCaptureImplicit);
        } else {
            int i = capture_of(resolve_stream(stream));
            if (i >= 0 && captures[i].status != CAPTURE_ACTIVE) {
                r = hipErrorStreamCaptureInvalidated;
            } else if (i >= 0) {
                capture_launch(i, f, gx, gy, gz, bx, by, bz, shared, kernarg, kernarg_size);
                captured = 1;
                capture_id = captures[i].id;
            }
        }
    }
    fakehip_launch_hook_t hook = launch_hook;
    void *hook_data = launch_hook_data;
    const char *kname = fn ? fn->name : NULL;
    module_t *m = fn ? fn->module : NULL;
    pthread_mutex_unlock(&lock);

    sb_put(&b, ",\"kernel\":", 10);
    sb_str(&b, kname);
    sb_fmt(&b, ",\"module\":%llu", U64(m));
    /* "captured" only on captured launches (absent = not captured), so records of ordinary launches
       keep their exact shape; "capture_id" names the capture. */
    if (captured) sb_fmt(&b, ",\"captured\":true,\"capture_id\":%llu", capture_id);
    rec_end(&b, r);
    if (!r && hook && !captured) {
        /* The runtime captures the arguments during the call; so does the fake, so the caller may
           reuse its buffer (even from inside the hook). */
        void *copy = kernarg ? malloc(kernarg_size ? kernarg_size : 1) : NULL;
        if (copy) memcpy(copy, kernarg, kernarg_size);
        r = hook(kname, m->image ? (const void *)m->image : m->image_arg, m->size, gx, gy, gz, bx, by, bz, shared,
                 stream, copy, kernarg_size, hook_data);
        free(copy);
        if (r) {
            rec_begin(&b, "fakehip_launch_hook");
            sb_put(&b, ",\"kernel\":", 10);
            sb_str(&b, kname);
            rec_end(&b, r);
        }
    }
    return r;
}

EXPORT hipError_t hipGraphLaunch(void *exec, hipStream_t stream) {
    init();
    sb_t b;
    rec_begin(&b, "hipGraphLaunch");
    sb_fmt(&b, ",\"exec\":%llu,\"stream\":%llu,\"device\":%d", U64(exec), U64(stream), current_device);
    hipError_t r = injected("hipGraphLaunch");
    if (!r && !exec) r = hipErrorInvalidValue;
    pthread_mutex_lock(&lock);
    if (!r && !ptr_has(live_execs, n_execs, exec)) r = hipErrorInvalidValue;
    if (!r) r = check_stream_work(&b, stream, 0);
    pthread_mutex_unlock(&lock);
    const graph_t *g = r ? NULL : ((graph_exec_t *)exec)->graph;
    sb_fmt(&b, ",\"launches\":%zu", g ? g->n : 0);
    rec_end(&b, r);
    if (r) return r;
    /* Replay in order through the hook, with the arguments captured at capture time. Each replayed
       launch is logged as "fakehip_graph_kernel" (never as hipModuleLaunchKernel). */
    for (size_t k = 0; k < g->n && !r; k++) {
        const captured_t *c = &g->items[k];
        pthread_mutex_lock(&lock);
        function_t *fn = find_function(c->function);
        int usable = fn && fn->module->loaded;
        fakehip_launch_hook_t hook = launch_hook;
        void *hook_data = launch_hook_data;
        pthread_mutex_unlock(&lock);
        rec_begin(&b, "fakehip_graph_kernel");
        sb_fmt(&b, ",\"exec\":%llu,\"index\":%zu,\"stream\":%llu,\"device\":%d,\"function\":%llu", U64(exec), k,
               U64(stream), c->device, U64(c->function));
        sb_fmt(&b, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shared_mem\":%u", c->grid[0], c->grid[1],
               c->grid[2], c->block[0], c->block[1], c->block[2], c->shared);
        sb_put(&b, ",\"kernel\":", 10);
        sb_str(&b, usable ? fn->name : NULL);
        if (c->kernarg) {
            sb_put(&b, ",\"kernarg\":", 11);
            sb_hex(&b, c->kernarg, c->kernarg_size);
        } else {
            sb_put(&b, ",\"kernarg\":null", 15);
        }
        sb_fmt(&b, ",\"kernarg_size\":%zu", c->kernarg_size);
        if (!usable) r = hipErrorInvalidHandle; /* its module was unloaded after the capture */
        if (!r && hook)
            r = hook(fn->name, fn->module->image ? (const void *)fn->module->image : fn->module->image_arg,
                     fn->module->size, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
                     c->shared, stream, c->kernarg, c->kernarg_size, hook_data);
        rec_end(&b, r);
    }
    return r;
}

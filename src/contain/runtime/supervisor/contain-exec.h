/*
 * contain-exec.h: the exec-side helpers the two static pid-1 programs share, the in-sandbox
 * supervisor (contain-supervisor.c) and the microVM guest agent (microvm/agent/
 * contain-guest-agent.c). Included by both, as static functions; runtime/static_build.py copies
 * it beside the source it compiles and hashes its content into the binary's name, so an edit
 * here rebuilds both programs.
 *
 * What it enforces: rlimit items are NAME:SOFT:HARD with a known name, decimal values without a
 * leading zero (or "inf"), soft <= hard; items are NUL-terminated and counted exactly; a command
 * is searched in the request's PATH only (empty elements skipped: they would mean the current
 * directory), never in the caller's, and an exec failure reaches the parent as (stage, errno)
 * on the error pipe. What it does not: decide which rlimits, PATH or argv a run gets (the host's
 * request does), or close descriptors (each program's child does before it calls exec_search).
 */
#ifndef CONTAIN_EXEC_H
#define CONTAIN_EXEC_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct rlimit_name {
    const char *name;
    int resource;
};

static const struct rlimit_name RLIMIT_NAMES[] = {
    {"AS", RLIMIT_AS},         {"CORE", RLIMIT_CORE},       {"CPU", RLIMIT_CPU},
    {"DATA", RLIMIT_DATA},     {"FSIZE", RLIMIT_FSIZE},     {"MEMLOCK", RLIMIT_MEMLOCK},
    {"MSGQUEUE", RLIMIT_MSGQUEUE}, {"NOFILE", RLIMIT_NOFILE}, {"NPROC", RLIMIT_NPROC},
    {"SIGPENDING", RLIMIT_SIGPENDING}, {"STACK", RLIMIT_STACK},
};

struct run_rlimit {
    int resource;
    struct rlimit value;
};

#define MAX_RLIMITS 16

/* What both programs run: argv and envp (NULL-terminated, sized by the caller for every item of
 * the frame), cwd, rlimits. The agent's SPAWN adds its guest-side limits and filter around it. */
struct run_request {
    const char *cwd;
    char **argv;
    char **envp;
    struct run_rlimit rlimits[MAX_RLIMITS];
    size_t n_rlimits;
};

/* "inf", or a decimal without a leading zero below RLIM_INFINITY (spell unlimited as inf). */
static int parse_limit_value(const char *s, size_t len, rlim_t *out) {
    if (len == 3 && memcmp(s, "inf", 3) == 0) {
        *out = RLIM_INFINITY;
        return 0;
    }
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if ((rlim_t)v == RLIM_INFINITY)
        return -1;
    *out = (rlim_t)v;
    return 0;
}

/* NAME:SOFT:HARD. Returns 0, or -1 with a message in err. */
static int parse_rlimit(const char *spec, struct run_rlimit *out, char *err, size_t errlen) {
    const char *c1 = strchr(spec, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c1 == NULL || c2 == NULL) {
        snprintf(err, errlen, "rlimit %.200s is not NAME:SOFT:HARD", spec);
        return -1;
    }
    size_t nlen = (size_t)(c1 - spec);
    int found = 0;
    for (size_t i = 0; i < sizeof RLIMIT_NAMES / sizeof RLIMIT_NAMES[0]; i++) {
        if (strlen(RLIMIT_NAMES[i].name) == nlen && memcmp(RLIMIT_NAMES[i].name, spec, nlen) == 0) {
            out->resource = RLIMIT_NAMES[i].resource;
            found = 1;
        }
    }
    if (!found) {
        snprintf(err, errlen, "unknown rlimit name in %.200s", spec);
        return -1;
    }
    if (parse_limit_value(c1 + 1, (size_t)(c2 - c1 - 1), &out->value.rlim_cur) < 0 ||
        parse_limit_value(c2 + 1, strlen(c2 + 1), &out->value.rlim_max) < 0) {
        snprintf(err, errlen, "rlimit %.200s: values are decimal or inf", spec);
        return -1;
    }
    if (out->value.rlim_cur > out->value.rlim_max) {
        snprintf(err, errlen, "rlimit %.200s: soft limit above hard limit", spec);
        return -1;
    }
    return 0;
}

/* Split a body of NUL-terminated items. Returns the count (0 for an empty body), or -1 when the
 * body does not end with a NUL or memory runs out. *items is malloc'd and points into body. */
/* One item both frames share: arg=, env=KEY=VALUE (non-empty KEY), cwd=/absolute (once),
 * rlimit=NAME:SOFT:HARD (each resource once, at most MAX_RLIMITS). Returns 1 when the item was
 * one of these and is stored in rq, 0 when it is none of them (the caller's own keys), -1 with
 * err set when it is one of them but malformed. */
static int parse_run_item(char *it, struct run_request *rq, size_t *nargs, size_t *nenv, char *err, size_t errlen) {
    if (strncmp(it, "arg=", 4) == 0) {
        rq->argv[(*nargs)++] = it + 4;
    } else if (strncmp(it, "env=", 4) == 0) {
        char *eq = strchr(it + 4, '=');
        if (eq == NULL || eq == it + 4) {
            snprintf(err, errlen, "env item %.200s is not env=KEY=VALUE", it);
            return -1;
        }
        rq->envp[(*nenv)++] = it + 4;
    } else if (strncmp(it, "cwd=", 4) == 0) {
        if (rq->cwd != NULL || it[4] != '/') {
            snprintf(err, errlen, "cwd must be given once, as an absolute path");
            return -1;
        }
        rq->cwd = it + 4;
    } else if (strncmp(it, "rlimit=", 7) == 0) {
        if (rq->n_rlimits >= MAX_RLIMITS) {
            snprintf(err, errlen, "more than %d rlimit items", MAX_RLIMITS);
            return -1;
        }
        if (parse_rlimit(it + 7, &rq->rlimits[rq->n_rlimits], err, errlen) < 0)
            return -1;
        for (size_t k = 0; k < rq->n_rlimits; k++) {
            if (rq->rlimits[k].resource == rq->rlimits[rq->n_rlimits].resource) {
                snprintf(err, errlen, "rlimit %.200s given twice", it + 7);
                return -1;
            }
        }
        rq->n_rlimits++;
    } else {
        return 0;
    }
    return 1;
}

static long split_nul_items(char *body, size_t len, char ***items) {
    *items = NULL;
    if (len == 0)
        return 0;
    if (body[len - 1] != '\0')
        return -1;
    size_t count = 0;
    for (size_t i = 0; i < len; i++)
        count += body[i] == '\0';
    char **out = calloc(count + 1, sizeof(char *));
    if (out == NULL)
        return -1;
    size_t k = 0;
    char *p = body;
    while (k < count) {
        out[k++] = p;
        p += strlen(p) + 1;
    }
    *items = out;
    return (long)k;
}

struct spawn_error {
    int32_t stage;
    int32_t err;
};

/* Report (stage, errno) to the parent on the error pipe and end the child. */
static void __attribute__((noreturn)) child_fail(int errfd, int stage, int err) {
    struct spawn_error e = {.stage = stage, .err = err};
    ssize_t n = write(errfd, &e, sizeof e);
    (void)n; /* nothing left to report to if this fails; the parent sees a short read */
    _exit(127);
}

static const char *env_lookup(char **envp, const char *key) {
    size_t klen = strlen(key);
    for (size_t i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], key, klen) == 0 && envp[i][klen] == '=')
            return envp[i] + klen + 1;
    }
    return NULL;
}

/* execvpe() semantics, but searching the request's PATH, never the caller's. Empty PATH elements
 * are skipped (they would mean "the current directory"). A failure is child_fail(stage). */
static void __attribute__((noreturn)) exec_search(char **argv, char **envp, int errfd, int stage) {
    const char *file = argv[0];
    if (file[0] == '\0')
        child_fail(errfd, stage, ENOENT);
    if (strchr(file, '/') != NULL) {
        execve(file, argv, envp);
        child_fail(errfd, stage, errno);
    }
    const char *path = env_lookup(envp, "PATH");
    if (path == NULL)
        path = "/usr/local/bin:/usr/bin:/bin";
    size_t flen = strlen(file);
    int saw_eacces = 0;
    int last = ENOENT;
    while (*path != '\0') {
        const char *colon = strchr(path, ':');
        size_t dlen = colon ? (size_t)(colon - path) : strlen(path);
        char buf[PATH_MAX];
        if (dlen > 0) {
            if (dlen + 1 + flen + 1 > sizeof buf) {
                last = ENAMETOOLONG;
            } else {
                memcpy(buf, path, dlen);
                buf[dlen] = '/';
                memcpy(buf + dlen + 1, file, flen + 1);
                execve(buf, argv, envp);
                switch (errno) {
                case EACCES: saw_eacces = 1; break;
                case ENOENT: case ENOTDIR: case ESTALE: case ELOOP: case ENAMETOOLONG:
                case ENODEV: case ETIMEDOUT: last = errno; break;
                default: child_fail(errfd, stage, errno);
                }
            }
        }
        if (colon == NULL)
            break;
        path = colon + 1;
    }
    child_fail(errfd, stage, saw_eacces ? EACCES : (last == ENAMETOOLONG ? ENOENT : last));
}

#endif

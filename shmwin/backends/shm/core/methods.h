/* methods.h -- what methods.c offers the role files: a method table's entries, each one's text
 * signature written once, and the argument helpers every method uses.
 *
 * CPython reads a builtin's signature from the head of its doc, "name($self, ...)\n--\n\n":
 * inspect.signature() and help() show it. Each macro writes that head from the method's name
 * and its arguments, then the doc, so that no entry spells its name twice or its calling
 * convention apart from its signature:
 *
 *   METHOD_KW      keywords too (METH_FASTCALL | METH_KEYWORDS): "name($self, /, args)"
 *   METHOD_POS     positional only (METH_FASTCALL): "name($self, args, /)"
 *   METHOD_O       one positional argument (METH_O): "name($self, arg, /)"
 *   METHOD_NOARGS  none (METH_NOARGS): "name($self, /)"
 *
 * An entry of another shape (positional then keyword arguments) is written out in full.
 */
#ifndef SHMWIN_METHODS_H
#define SHMWIN_METHODS_H

#define FASTCALL_KW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS
#define SIGNATURE_HEAD(name, args) #name "($self" args ")\n--\n\n"

#define METHOD_KW(name, f, args, doc) {#name, FASTCALL_KW(f), SIGNATURE_HEAD(name, ", /, " args) doc}
#define METHOD_POS(name, f, args, doc) \
    {#name, (PyCFunction)(void (*)(void))(f), METH_FASTCALL, SIGNATURE_HEAD(name, ", " args ", /") doc}
#define METHOD_O(name, f, arg, doc) {#name, (PyCFunction)(f), METH_O, SIGNATURE_HEAD(name, ", " arg ", /") doc}
#define METHOD_NOARGS(name, f, doc) {#name, (PyCFunction)(f), METH_NOARGS, SIGNATURE_HEAD(name, ", /") doc}

/* the base type's table (methods.c), which every role's type inherits */
extern PyMethodDef core_methods[];

/* Positional-or-keyword arguments of a METH_FASTCALL|METH_KEYWORDS call, by name (methods.c). */
int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names, int n,
          PyObject **out, const char *fname);
/* A cost (or an amount): a whole number >= at_least; NULL (not given) is 1 (methods.c). */
int cost_of(PyObject *obj, int64_t *cost, int64_t at_least);

/* parse(), then the first `required` arguments must have been given: else a TypeError,
 * "fname() needs <what>". */
static inline int parse_required(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                 const char *const *names, int n, int required, PyObject **out, const char *fname,
                                 const char *what) {
    if (parse(args, nargs, kwnames, names, n, out, fname) < 0) return -1;
    for (int i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() needs %s", fname, what);
            return -1;
        }
    }
    return 0;
}

/* A keyed method's arguments: parse()'s, the first of them (the key) required. The key alone,
 * positional, is the hot path (hit(key)): taken as it is, inline, with no name looked at. */
static inline int parse_keyed(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                              const char *const *names, int n, PyObject **out, const char *fname) {
    if (nargs == 1 && kwnames == NULL) {
        out[0] = args[0];
        for (int i = 1; i < n; i++) out[i] = NULL;
        return 0;
    }
    return parse_required(args, nargs, kwnames, names, n, 1, out, fname, "a key");
}

#endif /* SHMWIN_METHODS_H */

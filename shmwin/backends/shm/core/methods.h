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
 * and what every type's slots repeat: GC_SLOTS (its dealloc, traverse and clear), free_instance
 * (the end of its dealloc).
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

/* A type's GC slots, each named once: {Py_tp_dealloc, ...}, {Py_tp_traverse, ...}, {Py_tp_clear, ...} */
#define GC_SLOTS(dealloc, traverse, clear) {Py_tp_dealloc, dealloc}, {Py_tp_traverse, traverse}, {Py_tp_clear, clear}

/* The end of every dealloc here: the object freed, then the reference to its heap type that
 * each instance holds (PEP 630) given back. */
static inline void free_instance(PyObject *o) {
    PyTypeObject *tp = Py_TYPE(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

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

/* The prologue of a (key, <cost>=1) method (hit, fixed_incr, lease_spend, moving_hit): its
 * arguments parsed as parse_keyed does (`cost_name`: the second's), the Core entered (key_enter),
 * then the cost read: a whole number >= at_least, 1 if not given. 0; or -1 with the error set,
 * where the method's key_leave gives back what kc says is held. */
static inline int enter_key_cost(Core *c, KeyCall *kc, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                 const char *fname, const char *cost_name, PyObject **key, int64_t *cost,
                                 int64_t at_least) {
    const char *const names[] = {"key", cost_name};
    PyObject *a[2];
    if (parse_keyed(args, nargs, kwnames, names, 2, a, fname) < 0 || key_enter(c, kc) < 0) return -1;
    *key = a[0];
    return cost_of(a[1], cost, at_least);
}

#endif /* SHMWIN_METHODS_H */

/* methodtable.h -- a method table's entries, each one's text signature written once.
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
#ifndef SHMWIN_METHODTABLE_H
#define SHMWIN_METHODTABLE_H

#define FASTCALL_KW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS
#define SIGNATURE_HEAD(name, args) #name "($self" args ")\n--\n\n"

#define METHOD_KW(name, f, args, doc) {#name, FASTCALL_KW(f), SIGNATURE_HEAD(name, ", /, " args) doc}
#define METHOD_POS(name, f, args, doc) \
    {#name, (PyCFunction)(void (*)(void))(f), METH_FASTCALL, SIGNATURE_HEAD(name, ", " args ", /") doc}
#define METHOD_O(name, f, arg, doc) {#name, (PyCFunction)(f), METH_O, SIGNATURE_HEAD(name, ", " arg ", /") doc}
#define METHOD_NOARGS(name, f, doc) {#name, (PyCFunction)(f), METH_NOARGS, SIGNATURE_HEAD(name, ", /") doc}

#endif /* SHMWIN_METHODTABLE_H */

package collective

// Internals that the external tests (package collective_test, which imports
// collective/collectivetest) exercise.

func BytesOf[T Element](x []T) []byte               { return bytesOf(x) }
func ElemsOf[T Element](b []byte, scratch *[]T) []T { return elemsOf(b, scratch) }
func Reduce[T Element](dst, src []T, op Op)         { reduce(dst, src, op) }

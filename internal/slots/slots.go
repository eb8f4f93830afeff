// Package slots is a table of reusable slots for long-lived event loops:
// an index stays its owner's until released, released indexes are reused
// before the table grows, so the table's size follows its peak rather than
// its history and a steady churn allocates nothing. Epoll registrations
// carry the index (and a generation the owner keeps in its items, so that
// an event for a released slot is recognised).
package slots

// Table holds the items; index Items directly. The zero value is empty and
// ready.
type Table[T any] struct {
	Items []T
	free  []int32
}

// Take returns a free slot, its item reset to the zero value, growing the
// table when none is free. The item's old value is returned too, for a
// generation count the owner carries over.
func (t *Table[T]) Take() (slot int32, old T) {
	var zero T
	if n := len(t.free); n > 0 {
		slot, t.free = t.free[n-1], t.free[:n-1]
		old, t.Items[slot] = t.Items[slot], zero
		return slot, old
	}
	t.Items = append(t.Items, zero)
	return int32(len(t.Items) - 1), zero
}

// Release frees slot for a later Take; the item keeps its value until
// then (the owner marks it inactive).
func (t *Table[T]) Release(slot int32) { t.free = append(t.free, slot) }

// Used is the number of slots taken and not released.
func (t *Table[T]) Used() int { return len(t.Items) - len(t.free) }

package hopper

// CursorAfter is the cursor of a page that ends with the job lastID, for
// tests that start deep in a listing without walking to it.
func CursorAfter(lastID int64) string { return encodeCursor(lastID) }

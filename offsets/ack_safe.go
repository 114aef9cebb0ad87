//go:build !unsafeack

package offsets

// ackOnReceipt is false in every real build: the watermark waits for confirms.
const ackOnReceipt = false

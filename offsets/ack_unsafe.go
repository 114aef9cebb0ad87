//go:build unsafeack

package offsets

// ackOnReceipt makes Commit acknowledge a transaction on receipt, before its events are confirmed. It
// exists only so the test suite can show that its broker-cut test fails against a wrong acknowledgement;
// it is compiled only with -tags unsafeack and must never ship.
const ackOnReceipt = true

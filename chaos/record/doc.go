// Package record writes a chaos run's check.History while it happens: the Recorder the runner's
// goroutines share, the routers' and the commands' output parsed into check.LogLine (LogWriter), the
// harness's own consumer of the run's queue (Consume) and the /readyz sampler (SampleReady).
//
// It owns what the harness sees and nothing else: it judges nothing (chaos/check does, over the whole
// History) and decides nothing (the runner in chaos/ does).
//
// Invariants:
//  1. Every write to the History goes through the Recorder's lock, so the runner may read it while
//     goroutines record (Recorder.With).
//  2. The consumer records a delivery before it acknowledges it, and after losing its channel it
//     subscribes again at once (the messages it had not acknowledged come again: duplicates the checker
//     expects), recording the loss as KindConsumerLost.
package record

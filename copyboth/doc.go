// Package copyboth reads the CopyBoth stream of a replication connection straight from its wire: Install
// puts a Wire below pgproto3's message reader (pgconn.Config.BuildFrontend, so TLS included), and Frames
// reads the stream's messages from it once START_REPLICATION has returned.
//
// Invariants, each pinned by a test:
//   - Until the stream starts, the Wire hands pgconn whole messages only, never a byte past the end of the
//     current one, so pgproto3 has buffered nothing of the stream when START_REPLICATION returns
//     (TestWireNeverReadsPastAMessage).
//   - A logical decoding message is judged from its header before its content is read: one with another
//     prefix, or with the router's prefix over the limit, is discarded while it is read (at most wireBuffer
//     bytes of it held at once), never buffered whole (TestFramesDiscardMessagesFromTheirHeader; end to end
//     cmd/cdc-router's TestLargeMessagesAreJudgedFromTheirHeader).
//   - A read that ends at the connection's read deadline keeps what was read: the next call goes on with
//     the same message, and Moved says the server was speaking, only slowly.
//
// It holds no connection and decides nothing: package replication owns the replication connection and
// reads through the Wire it installed; what a frame means is the stream's and the decoder's.
package copyboth

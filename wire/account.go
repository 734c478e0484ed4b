package wire

// NodeJSAPIPrefix is the JetStream API prefix of a node's connection: the host makes its
// JetStream calls with jetstream.NewWithAPIPrefix(nc, NodeJSAPIPrefix). Node users live in their
// own NATS account, which has no JetStream of its own and imports, under this prefix, the few
// JetStream API calls a node may make in the mesh account (docs/decisions/0011, "Identities").
//
// It names the mesh account, not a names prefix: one nodes account imports from one mesh
// account, whatever names prefixes its buckets use (a node's permissions name its own streams),
// and a second mesh on the same operator has its own pair of accounts, where the same prefix
// means its own mesh account.
const NodeJSAPIPrefix = "$JS.mesh.API"

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/novox/mesh-host/host/enrol"
	"github.com/novox/mesh-host/host/truststore"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

const enrolAbout = `Join the mesh with a one-time token from ` + "`mesh-release enrol-token`" + ` (TOKEN, or - to read it
from stdin). This makes the node's own key (its seed never leaves this machine), connects to the
bus the token names over TLS pinned to the token's CA fingerprint, and asks the mesh's enrolment
service to sign the key. Then it writes ROOT/node.creds (0600), ROOT/ca.pem and ROOT/host.json
(0600), keeping the settings already in host.json. The node id is --node, else the token's,
else MESH_HOST_NODE or host.json's "node", else the short hostname. A root enrolled as another
node is refused without --replace. A running host takes the new settings and credentials when it
next starts (systemctl restart mesh-launcher), never before.

Exit status: 0 enrolled; 1 refused (the service's reason is printed, or the root is another
node's) or failed; 2 usage.`

func enrolCmd(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSetWithOperands("enrol", "TOKEN", enrolAbout)
	root := fs.String("root", "", "the root (MESH_HOST_ROOT; default "+rollback.DefaultRoot+")")
	node := fs.String("node", "", "the node `ID` to enrol as")
	replace := fs.Bool("replace", false, "this node id is enrolled already (a reinstalled machine): revoke that key and take its place;\nor this root is enrolled as another node: make it this one")
	timeout := fs.Duration("timeout", 15*time.Second, "how long to wait for each bus URL and the service")
	ops, code, ok := prog.ParseOperands(fs, args, []string{"TOKEN"}, stdout, stderr)
	if !ok {
		return code
	}
	token := ops[0]
	if token == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, wire.MaxTokenBytes+1))
		if err != nil {
			fmt.Fprintf(stderr, "mesh-host enrol: read the token from stdin: %v\n", err)
			return 1
		}
		token = string(b)
	}
	if *root == "" {
		*root = getenv(rollback.EnvRoot)
	}
	if *root == "" {
		*root = rollback.DefaultRoot
	}
	tok, err := wire.ParseToken(token)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host enrol: %v\n", err)
		return 1
	}
	configured, err := enrol.ConfiguredNode(*root)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host enrol: %v\n", err)
		return 1
	}
	id, err := enrol.ChooseNode(*node, tok.Node, getenv("MESH_HOST_NODE"), configured, os.Hostname)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host enrol: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(tok.URLs)+1)*(*timeout))
	defer cancel()
	res, err := enrol.Enrol(ctx, enrol.Options{Token: token, Root: *root, Node: id, Replace: *replace, Timeout: *timeout})
	if err != nil {
		var refused *enrol.RefusedError
		msg := err.Error()
		if errors.As(err, &refused) {
			msg = refused.Error()
		}
		fmt.Fprintf(stderr, "mesh-host enrol: %s\n", strings.TrimPrefix(msg, "enrol: "))
		return 1
	}
	fmt.Fprintf(stdout, "enrolled node %s (key %s) through %s\nwrote %s, %s and %s\n", res.Node, res.PublicKey, res.URL, res.Creds, res.CA, res.Config)
	if res.Root.Version > 0 {
		fmt.Fprintf(stdout, "trusts %s, the root the token pins (stored in %s); it follows the chain from there\n", res.Root, truststore.Dir(*root))
	}
	return 0
}

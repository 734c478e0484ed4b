package web

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/novox/mesh-host/internal/text"
)

// Login is who may read the page off loopback: a token (sent as a bearer token, or as the
// password of HTTP basic auth with any user name, so a browser can send it) or users with
// bcrypt hashes of their passwords (HTTP basic auth).
type Login struct {
	token [sha256.Size]byte // the token's hash: compared in constant time whatever its length
	users map[string][]byte // user → bcrypt hash
}

// minToken is the shortest token taken: 128 bits, hex or base64.
const minToken = 22

// maxLoginFile bounds a token or users file.
const maxLoginFile = 64 << 10

// TokenLogin reads a token from path: its first line, at least minToken bytes.
func TokenLogin(path string) (*Login, error) {
	b, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if len(tok) < minToken {
		return nil, fmt.Errorf("token file %s: the token is %d bytes, want at least %d (e.g. `openssl rand -hex 16`)", path, len(tok), minToken)
	}
	return &Login{token: sha256.Sum256([]byte(tok))}, nil
}

// BasicLogin reads users from path: lines `user:bcrypt-hash` (htpasswd -B's format; blank lines
// and lines starting with # are skipped).
func BasicLogin(path string) (*Login, error) {
	b, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	l := &Login{users: map[string][]byte{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("users file %s line %d: want user:bcrypt-hash", path, n)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("users file %s line %d (user %s): not a bcrypt hash (htpasswd -nB USER makes one): %w", path, n, text.Bound(user), err)
		}
		l.users[user] = []byte(hash)
	}
	if len(l.users) == 0 {
		return nil, fmt.Errorf("users file %s names no user (lines user:bcrypt-hash)", path)
	}
	return l, nil
}

// readSecret reads a login file, refusing one others may read: it holds what lets in.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("login file %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLoginFile+1))
	if err != nil {
		return nil, fmt.Errorf("login file %s: %w", path, err)
	}
	if len(b) > maxLoginFile {
		return nil, fmt.Errorf("login file %s is larger than %d bytes", path, maxLoginFile)
	}
	return b, nil
}

// errLogin is what a refused request is told: nothing of why.
var errLogin = errors.New("login required")

// Wrap lets through h only requests that log in.
func (l *Login) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.allows(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="mesh fleet", charset="UTF-8"`)
			http.Error(w, errLogin.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (l *Login) allows(r *http.Request) bool {
	if l.users == nil {
		var got string
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			got = strings.TrimPrefix(a, "Bearer ")
		} else if _, p, ok := r.BasicAuth(); ok {
			got = p
		} else {
			return false
		}
		h := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(h[:], l.token[:]) == 1
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	hash, known := l.users[user]
	if !known {
		// the same work as a known user's, so that timing does not tell which users exist
		hash = dummyHash()
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(pass)) == nil && known
}

// dummyHash is a bcrypt hash of the default cost compared against when the user is unknown,
// made once, at the first such request.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.DefaultCost)
	return h
})

package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func writeFile(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "login")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const token = "0123456789abcdef0123456789abcdef"

// A token file is taken only when others cannot read it and its token is long enough.
func TestTokenLoginRefusesAShortTokenAndAFileOthersRead(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		mode       os.FileMode
		want       string
	}{
		{"a short token", "letmein\n", 0o600, "want at least 22"},
		{"an empty file", "", 0o600, "want at least 22"},
		{"a file others read", token + "\n", 0o644, "readable by others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TokenLogin(writeFile(t, tc.body, tc.mode))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	if _, err := TokenLogin(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing token file was taken")
	}
}

// A users file holds user:bcrypt-hash lines; anything else is refused naming the line.
func TestBasicLoginRefusesWhatIsNotABcryptHash(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"a plain password", "ops:secret\n", "line 1 (user ops): not a bcrypt hash"},
		{"no colon", "# users\nops\n", "line 2: want user:bcrypt-hash"},
		{"no user", "# nobody\n\n", "names no user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BasicLogin(writeFile(t, tc.body, 0o600))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// Behind a login, a request without it, or with a wrong one, is refused with a basic-auth
// challenge (so a browser asks); the right token (bearer, or as basic auth's password) or user
// and password pass.
func TestLoginLetsInOnlyWhoLogsIn(t *testing.T) {
	tok, err := TokenLogin(writeFile(t, token+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users, err := BasicLogin(writeFile(t, "ops:"+string(hash)+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("the page")) })
	for _, tc := range []struct {
		name  string
		login *Login
		set   func(r *http.Request)
		code  int
	}{
		{"no credentials, token login", tok, func(*http.Request) {}, 401},
		{"the token as bearer", tok, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }, 200},
		{"the token as basic password", tok, func(r *http.Request) { r.SetBasicAuth("anyone", token) }, 200},
		{"a wrong bearer token", tok, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") }, 401},
		{"a prefix of the token", tok, func(r *http.Request) { r.SetBasicAuth("anyone", token[:10]) }, 401},
		{"no credentials, users login", users, func(*http.Request) {}, 401},
		{"the user's password", users, func(r *http.Request) { r.SetBasicAuth("ops", "correct horse") }, 200},
		{"a wrong password", users, func(r *http.Request) { r.SetBasicAuth("ops", "wrong horse") }, 401},
		{"an unknown user", users, func(r *http.Request) { r.SetBasicAuth("eve", "correct horse") }, 401},
		{"a bearer token for users", users, func(r *http.Request) { r.Header.Set("Authorization", "Bearer correct horse") }, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			tc.set(r)
			w := httptest.NewRecorder()
			tc.login.Wrap(ok).ServeHTTP(w, r)
			if w.Code != tc.code {
				t.Fatalf("answered %d, want %d", w.Code, tc.code)
			}
			if tc.code == 401 && (!strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic ") || strings.Contains(w.Body.String(), "the page")) {
				t.Errorf("a refusal: challenge %q, body %q", w.Header().Get("WWW-Authenticate"), w.Body.String())
			}
		})
	}
}

// Package dashboard is the admin web panel served at /admin/ by every
// node: static pages (plain ES modules and CSS, embedded with go:embed)
// built on the admin API only, and the sign-in that lets a browser use
// that API without holding the admin key: a server-side session behind
// an HttpOnly, SameSite=Strict cookie, with a CSRF token on every
// state-changing request. See DESIGN.md.
package dashboard

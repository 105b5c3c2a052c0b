package e2e_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// cliCommands are every dnnfs subcommand (as words after "dnnfs").
var cliCommands = [][]string{
	{"mkfs"}, {"mount"}, {"fsck"}, {"status"}, {"cp"}, {"recover"},
	{"table", "create"}, {"table", "info"}, {"version"}, {"completion", "bash"},
}

// flagLine is one line of a help text's flag list: "  -h, --name type   meaning".
var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)(?:\[=[^\]]*\])?(?: \w+)?\s{2,}(\S.*)$`)

// TestCLIHelp: `dnnfs CMD --help`, `dnnfs CMD -h` and `dnnfs help CMD`
// exit 0 and print the same help on stdout, naming the command and giving
// every flag a meaning; every flag the help lists is one the command takes
// (cobra's completion of "--" lists the flags the command parses).
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	for _, words := range cliCommands {
		name := strings.Join(words, " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			help, stderr, code := harness.Run(t, append(append([]string{}, words...), "--help")...)
			if code != 0 || stderr != "" {
				t.Fatalf("dnnfs %s --help: exit %d, stderr %q", name, code, stderr)
			}
			if !strings.Contains(help, "dnnfs "+name) || !strings.Contains(help, "Usage:") {
				t.Errorf("dnnfs %s --help does not show its usage:\n%s", name, help)
			}
			for _, alt := range [][]string{append(append([]string{}, words...), "-h"), append([]string{"help"}, words...)} {
				out, errOut, code := harness.Run(t, alt...)
				if code != 0 || errOut != "" || out != help {
					t.Errorf("dnnfs %s: exit %d, stderr %q, stdout differs from --help: %v\n%s", strings.Join(alt, " "), code, errOut, out != help, out)
				}
			}
			listed := map[string]bool{}
			inFlags := false
			for _, line := range strings.Split(help, "\n") {
				if strings.HasSuffix(line, "Flags:") {
					inFlags = true
					continue
				}
				if !inFlags || strings.TrimSpace(line) == "" {
					inFlags = inFlags && strings.TrimSpace(line) != ""
					continue
				}
				m := flagLine.FindStringSubmatch(line)
				if m == nil {
					t.Errorf("dnnfs %s --help: flag line without a meaning: %q", name, line)
					continue
				}
				listed[m[1]] = true
			}
			if !listed["help"] {
				t.Errorf("dnnfs %s --help lists no --help flag:\n%s", name, help)
			}
			out, _, code := harness.Run(t, append(append([]string{"__complete"}, words...), "--")...)
			if code != 0 {
				t.Fatalf("dnnfs __complete %s --: exit %d", name, code)
			}
			taken := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				if f, ok := strings.CutPrefix(line, "--"); ok {
					f, _, _ = strings.Cut(f, "\t")
					taken[f] = true
				}
			}
			for f := range taken {
				if !listed[f] {
					t.Errorf("dnnfs %s takes --%s but its help does not list it", name, f)
				}
			}
			for f := range listed {
				if !taken[f] && f != "help" {
					t.Errorf("dnnfs %s --help lists --%s, which it does not take", name, f)
				}
			}
		})
	}
}

// TestCLIVersion: `dnnfs --version` and `dnnfs version` print the same line.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	a, errA, codeA := harness.Run(t, "--version")
	b, errB, codeB := harness.Run(t, "version")
	if codeA != 0 || codeB != 0 || errA != "" || errB != "" {
		t.Fatalf("--version: exit %d %q; version: exit %d %q", codeA, errA, codeB, errB)
	}
	if a != b || !regexp.MustCompile(`^dnnfs \S+\n$`).MatchString(a) {
		t.Errorf("dnnfs --version printed %q, dnnfs version %q; want the same line \"dnnfs VERSION\"", a, b)
	}
	// No command: the usage on stderr, exit 2 (a bad command line).
	out, stderr, code := harness.Run(t)
	if code != 2 || out != "" || !strings.Contains(stderr, "Available Commands:") {
		t.Errorf("dnnfs without a command: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// An unknown help topic or shell is a usage error, not help.
	badRun(t, "", []int{2}, "help", "frob")
	badRun(t, "", []int{2}, "completion", "tcsh")
	badRun(t, "", []int{2}, "completion")
	// A mistyped command is a usage error that suggests the right one.
	msg := badRun(t, "", []int{2}, "moutn")
	if !strings.Contains(msg, `"mount"`) {
		t.Errorf("dnnfs moutn does not suggest mount: %s", msg)
	}
}

// TestCLICompletion sources `dnnfs completion bash` in a real bash with
// bash-completion loaded and asks it, as the shell does on TAB, to complete
// command names and flag values; zsh and fish scripts are generated.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Fatalf("%v (make deps installs bash-completion)", err)
	}
	bin := harness.Binary(t)
	script := t.TempDir() + "/dnnfs.bash"
	out, stderr, code := harness.Run(t, "completion", "bash")
	if code != 0 || stderr != "" {
		t.Fatalf("dnnfs completion bash: exit %d, %s", code, stderr)
	}
	writeFile(t, script, []byte(out), 0o644)
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS as bash fills them for "dnnfs WORDS<TAB>"; the last
		// word is the one being completed.
		sh := `source "$1"; source "$2"; shift 2
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
__start_dnnfs 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", append([]string{"-c", sh, "bash", bashCompletion, script, bin}, words...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", words, err, b)
		}
		return strings.Fields(string(b))
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"mo"}, []string{"mount"}},
		{[]string{"f"}, []string{"fsck"}},
		{[]string{"mount", "--lo"}, []string{"--lock", "--log-file", "--log-format", "--log-level"}},
		{[]string{"mount", "--lock", ""}, []string{"file", "range"}},
		{[]string{"mount", "--atime", "no"}, []string{"noatime"}},
		{[]string{"table", "create", "t", "--dtype", ""}, []string{"bf16", "f16", "f32"}},
		{[]string{"completion", "z"}, []string{"zsh"}},
	} {
		got := complete(c.words...)
		if strings.Join(slices.Sorted(slices.Values(got)), " ") != strings.Join(c.want, " ") {
			t.Errorf("bash completes dnnfs %q to %q, want %q", c.words, got, c.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		out, stderr, code := harness.Run(t, "completion", shell)
		if code != 0 || stderr != "" || !strings.Contains(out, "__complete") {
			t.Errorf("dnnfs completion %s: exit %d, stderr %q, %d bytes", shell, code, stderr, len(out))
		}
	}
}

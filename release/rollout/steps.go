package rollout

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSteps reads the cumulative shares of --steps: "10%,50%,100%" (the % signs are optional).
// Each share is a whole percent from 1 to 100, each larger than the one before, and the last is
// 100, so that the rollout ends with every node. An error names the share at fault.
func ParseSteps(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no steps given; want cumulative shares of the fleet ending at 100%%, like 10%%,50%%,100%%")
	}
	parts := strings.Split(s, ",")
	steps := make([]int, 0, len(parts))
	for i, part := range parts {
		p := strings.TrimSpace(part)
		if p == "" {
			return nil, fmt.Errorf("step %d is empty; want shares like 10%%,50%%,100%%", i+1)
		}
		n, err := strconv.Atoi(strings.TrimSuffix(p, "%"))
		switch {
		case err != nil:
			return nil, fmt.Errorf("step %q is not a whole percentage like 10%%", p)
		case n < 1 || n > 100:
			return nil, fmt.Errorf("step %q is outside 1%%..100%%", p)
		case len(steps) > 0 && n <= steps[len(steps)-1]:
			return nil, fmt.Errorf("step %q is not larger than the one before (%d%%); the shares are cumulative, each larger than the last", p, steps[len(steps)-1])
		}
		steps = append(steps, n)
	}
	if last := steps[len(steps)-1]; last != 100 {
		return nil, fmt.Errorf("the last step is %d%%; it must be 100%% so that the rollout reaches every node", last)
	}
	return steps, nil
}

// FormatSteps writes steps as --steps takes them: "10%,50%,100%".
func FormatSteps(steps []int) string {
	parts := make([]string, len(steps))
	for i, n := range steps {
		parts[i] = strconv.Itoa(n) + "%"
	}
	return strings.Join(parts, ",")
}

// The IAM policy evaluator of make e2e (e2e/iam talks to it): one JSON
// request per stdin line, {id, identityPolicies, resourcePolicy?, action,
// principal, resource, context}; one JSON answer per stdout line, {id,
// result, allow, deny, error}: the decision of @cloud-copilot/iam-simulate and
// the policies (one statement each) whose statements decided it.
import { createInterface } from 'node:readline'
import { runSimulation } from '@cloud-copilot/iam-simulate'

const out = (v) => process.stdout.write(JSON.stringify(v) + '\n')
const names = (list) => (list || []).map((s) => s.policyId).filter(Boolean)

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue
  let req
  try {
    req = JSON.parse(line)
    const sim = {
      identityPolicies: req.identityPolicies,
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      request: {
        action: req.action,
        principal: req.principal,
        resource: { accountId: req.account, resource: req.resource },
        contextVariables: req.context || {},
      },
    }
    if (req.resourcePolicy) sim.resourcePolicy = req.resourcePolicy
    const r = await runSimulation(sim, {})
    if (r.resultType === 'error') {
      out({ id: req.id, error: JSON.stringify(r.errors) })
      continue
    }
    const a = r.resultType === 'single' ? r.result.analysis : r.results[0]?.analysis
    out({
      id: req.id,
      result: r.overallResult,
      allow: names(a?.identityAnalysis?.allowStatements),
      deny: names(a?.identityAnalysis?.denyStatements).concat(names(a?.resourceAnalysis?.denyStatements)),
    })
  } catch (e) {
    out({ id: req?.id, error: String(e && e.stack ? e.stack : e) })
  }
}

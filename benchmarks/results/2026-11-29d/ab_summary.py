import json, glob, sys, math
tot = []
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    d = json.load(open(f)); m = d['methods']; sp = d.get('spread', {})
    a, b = m['fastcoder'], m[sys.argv[2] if len(sys.argv) > 2 else 'fastcoder-step-by-step']
    r = b['ms_per_token'] / a['ms_per_token']; tot.append(r)
    print(f.split('/')[-1], 'fc %.3f ms/tok (fwd/step %.3f, retr %.3f, other %.3f, AL %.2f) | single %.3f (fwd/step %.3f, retr %.3f, other %.3f, AL %.2f) | single/fc %.3f | ar %.3f' % (
        a['ms_per_token'], a['forward_ms_per_step'], a['step_retrieval_share'], a['step_other_share'], a['mean_accepted_length'],
        b['ms_per_token'], b['forward_ms_per_step'], b['step_retrieval_share'], b['step_other_share'], b['mean_accepted_length'], r, m['ar']['ms_per_token']))
print('geomean single/fc %.3f' % math.exp(sum(map(math.log, tot)) / len(tot)))
